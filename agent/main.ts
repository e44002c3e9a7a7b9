/** Entry point of bin/kpr-agent. */
import { Agent } from './agent.js';
import { parseAgentArgs, USAGE } from './config/agent-config.js';
import { logIgnoredKubeProxySettings, logUnknownKubeProxyFields } from './config/kube-proxy-config.js';
import { createLogger } from './log/log.js';

async function main(): Promise<void> {
  let cfg;
  try {
    cfg = parseAgentArgs(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`kpr-agent: ${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  if (cfg === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const log = createLogger(cfg.logLevel, { node: cfg.nodeName });
  logUnknownKubeProxyFields(cfg.unknownKubeProxyFields, log);
  logIgnoredKubeProxySettings(cfg.ignoredKubeProxySettings, log);
  const agent = new Agent(cfg, log);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info('stopping', { signal });
    agent.stop().then(
      () => process.exit(0),
      (err) => {
        log.error('stop failed', { error: (err as Error).message });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  try {
    await agent.start();
  } catch (err) {
    log.error('agent failed to start', { error: (err as Error).message });
    process.exit(1);
  }
  // The initial sync is done and the pinned datapath serves it: from here on a
  // failure nobody caught is logged and counted, and the sync loop goes on.
  process.on('uncaughtException', (err) => agent.uncaughtFailure(err));
  process.on('unhandledRejection', (reason) => agent.uncaughtFailure(reason));
}

void main();
