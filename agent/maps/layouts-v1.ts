/**
 * The layouts of version 1 (every release before the frontend id was
 * widened to 32 bits; kpr_svc_meta's until its names were widened), of the
 * structs version 2 changed. Pins of these maps
 * at version 1 are read, and converted member by member, when an agent
 * migrates a node (agent/datapath/migration.ts); the test fixture
 * test/fixtures/bpf-v1/kpr_types.h declares the same in C and
 * test/bpf/layout.test.ts checks the two against each other.
 */
import { structLayout } from './struct-codec.js';
import type { AffinityKey, AffinityMatchKey, CtVal, RevNatVal, SrcRangeKey, SvcMeta, SvcVal, TermKey } from './map-types.js';

export const SVC_VAL_V1 = structLayout<SvcVal>()('kpr_svc_val', [
  { c: 'backend_id', kind: 'u32' },
  { c: 'count', kind: 'u16' },
  { c: 'frontend_id', kind: 'u16' },
  { c: 'flags', kind: 'u16' },
  { c: 'pad', kind: 'pad', size: 2 },
]);

export const REVNAT_VAL_V1 = structLayout<RevNatVal>()('kpr_revnat_val', [
  { c: 'addr', kind: 'addr' },
  { c: 'port', kind: 'be16' },
  { c: 'frontend_id', kind: 'u16' },
]);

export const AFFINITY_KEY_V1 = structLayout<AffinityKey>()('kpr_affinity_key', [
  { c: 'netns_cookie', kind: 'u64' },
  { c: 'client', kind: 'addr' },
  { c: 'frontend_id', kind: 'u16' },
  { c: 'pad', kind: 'pad', size: 6 },
]);

export const AFFINITY_MATCH_KEY_V1 = structLayout<AffinityMatchKey>()('kpr_affinity_match_key', [
  { c: 'backend_id', kind: 'u32' },
  { c: 'frontend_id', kind: 'u16' },
  { c: 'pad', kind: 'pad', size: 2 },
]);

export const TERM_KEY_V1 = structLayout<TermKey>()('kpr_term_key', [
  { c: 'addr', kind: 'addr' },
  { c: 'port', kind: 'be16' },
  { c: 'frontend_id', kind: 'u16' },
  { c: 'proto', kind: 'u8' },
  { c: 'pad', kind: 'pad', size: 3 },
]);

export const CT_VAL_V1 = structLayout<CtVal>()('kpr_ct_val', [
  { c: 'nat_saddr', kind: 'addr' },
  { c: 'nat_daddr', kind: 'addr' },
  { c: 'nat_sport', kind: 'be16' },
  { c: 'nat_dport', kind: 'be16' },
  { c: 'backend_id', kind: 'u32' },
  { c: 'expires_ns', kind: 'u64' },
  { c: 'frontend_id', kind: 'u16' },
  { c: 'flags', kind: 'u8' },
  { c: 'pad', kind: 'pad', size: 5 },
]);

export const SRC_RANGE_KEY_V1 = structLayout<SrcRangeKey>()('kpr_src_range_key', [
  { c: 'prefixlen', kind: 'u32' },
  { c: 'frontend_id', kind: 'u16' },
  { c: 'pad', kind: 'pad', size: 2 },
  { c: 'addr', kind: 'addr' },
]);

/** 96 and 32 bytes: a 63-character namespace and Service name did not fit, and names cut alike read as one. */
export const SVC_META_V1 = structLayout<SvcMeta>()('kpr_svc_meta', [
  { c: 'name', kind: 'cstr', size: 96 },
  { c: 'port_name', kind: 'cstr', size: 32 },
  { c: 'type', kind: 'u8' },
  { c: 'proto', kind: 'u8' },
  { c: 'pad', kind: 'pad', size: 2 },
]);
