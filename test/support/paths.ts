export { repoRoot, bpfObjectPath, agentBin, cliBin } from '../../sandbox/repo.js';
