/**
 * kpr's typed binding to the kernel through libbpf (koffi FFI).
 */
export { KprBpfError, errnoName, type KprBpfErrorInit } from './errors.js';
export { captureLibbpfMessages, setLibbpfLogger, silenceLibbpf, type LibbpfLogger, type LibbpfLogLevel } from './log.js';
export { ensureBpffs, isBpffs, unmountBpffs, BPF_FS_MAGIC, DEFAULT_BPFFS_ROOT, type EnsureBpffsOptions } from './bpffs.js';
export { BpfObject, type BpfObjectOpenOptions } from './bpf-object.js';
export { BpfProgram, BPF_ATTACH_TYPE, attachTypeName, programMapIds } from './bpf-program.js';
export { BpfMap, BPF_ANY, BPF_NOEXIST, BPF_EXIST, BPF_F_LOCK, BPF_MAP_TYPE, type DeleteBatchOptions } from './bpf-map.js';
export { type BatchEntries } from './map-batch-read.js';
export { mapTypeName, mapInfoByFd, type BpfMapInfo } from './map-info.js';
export { possibleCpus, sumPerCpuU64, perCpuSlots, isPerCpuMapType, valueStrideFor } from './per-cpu.js';
export {
  attachCgroup,
  attachCgroupTemporarily,
  detachLinkKeepPin,
  detachPinnedLink,
  pinnedLinkInfo,
  queryCgroupPrograms,
  cgroupId,
  linkInfoByFd,
  type CgroupAttachment,
  type LinkInfo,
  type TemporaryCgroupLink,
} from './attach.js';
export { BpfIterator } from './iter.js';
export { HeldBpfObject, bpfObjectOfFd, pinnedObjectAt } from './pinned-object.js';
export { withNetns, ifIndex, currentNetnsCookie } from './netns.js';
export { SockDiag, SockDiagError, withSockDiag, type InetFamily, type UdpSocketEntry, type UdpDumpFilter } from './sock-diag.js';
export {
  attachTcx,
  listInterfaces,
  pinnedTcxLinkInfo,
  queryTcxPrograms,
  queryTcxProgramsByIndex,
  tcxLinkInfo,
  tcxSupported,
  TCX,
  type TcxAttachment,
  type TcxDirection,
  type TcxLinkInfo,
} from './tcx.js';
export {
  attachTcFilter,
  detachTcFilter,
  detachTcFilterByIndex,
  ensureClsact,
  queryTcFilter,
  queryTcFilterByIndex,
  progNameById,
  BPF_TC,
  KPR_TC_FILTER,
  type BpfTcAttachPoint,
  type TcFilterAttachment,
  type TcFilterId,
} from './tc-classic.js';
export { testRun, testRunFd, type TestRunResult } from './test-run.js';
export { pinThreadToCpu } from './affinity.js';
export { RingBuffer, type RingRecordHandler } from './ring-buffer.js';
export { releaseFreeNativeMemory } from './memory.js';
export { BatchWriter, BATCH_WRITER_LIBRARY } from './batch-writer.js';
export { probeBatchLookup, probeMapType, probeCgroupAttachType, type NativeProbe } from './probes.js';
