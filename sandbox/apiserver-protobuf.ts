/**
 * Request bodies in Kubernetes' protobuf encoding (application/vnd.kubernetes.protobuf),
 * which kubectl's typed clients send (`kubectl create configmap`), decoded to
 * the JSON form the store keeps. The envelope is "k8s\0" and a runtime.Unknown
 * (typeMeta 1: apiVersion 1, kind 2; raw 2); the sandbox decodes the raw
 * object of a ConfigMap (metadata 1, data 2, binaryData 3, immutable 4) with
 * the ObjectMeta fields such a request carries. Anything else is answered
 * 415, as a server that does not speak the encoding would.
 */
import { ApiError } from './apiserver-status.js';

const MAGIC = Buffer.from('k8s\0', 'latin1');

const unsupported = (what: string) =>
  new ApiError(415, 'UnsupportedMediaType', `the sandbox API server decodes protobuf request bodies of ConfigMaps only (${what}); send application/json`);

interface Field {
  num: number;
  /** Length-delimited contents, or undefined for a varint. */
  bytes?: Buffer;
  varint?: bigint;
}

function readVarint(buf: Buffer, pos: { at: number }): bigint {
  let v = 0n;
  for (let shift = 0n; ; shift += 7n) {
    if (pos.at >= buf.length || shift > 63n) throw new ApiError(400, 'BadRequest', 'unable to decode the request body: truncated protobuf varint');
    const b = buf[pos.at++];
    v |= BigInt(b & 0x7f) << shift;
    if ((b & 0x80) === 0) return v;
  }
}

/** The fields of one protobuf message, in order (wire types 0 and 2; others are not used by these messages). */
function fields(buf: Buffer): Field[] {
  const out: Field[] = [];
  const pos = { at: 0 };
  while (pos.at < buf.length) {
    const key = readVarint(buf, pos);
    const num = Number(key >> 3n);
    const wire = Number(key & 7n);
    if (wire === 0) out.push({ num, varint: readVarint(buf, pos) });
    else if (wire === 2) {
      const len = Number(readVarint(buf, pos));
      if (pos.at + len > buf.length) throw new ApiError(400, 'BadRequest', 'unable to decode the request body: truncated protobuf field');
      out.push({ num, bytes: buf.subarray(pos.at, pos.at + len) });
      pos.at += len;
    } else throw unsupported(`wire type ${wire}`);
  }
  return out;
}

const str = (f: Field) => (f.bytes ?? Buffer.alloc(0)).toString('utf8');

/** A map<string, string|bytes> entry: key 1, value 2. */
function mapEntry(f: Field): [string, Buffer] {
  let key = '';
  let value: Buffer = Buffer.alloc(0);
  for (const e of fields(f.bytes ?? Buffer.alloc(0))) {
    if (e.num === 1) key = str(e);
    else if (e.num === 2) value = e.bytes ?? Buffer.alloc(0);
  }
  return [key, value];
}

function objectMeta(buf: Buffer): Record<string, unknown> {
  const md: Record<string, any> = {};
  const names: Record<number, string> = { 1: 'name', 2: 'generateName', 3: 'namespace', 5: 'uid', 6: 'resourceVersion' };
  for (const f of fields(buf)) {
    // Go's encoder writes every scalar, empty or not: an empty one is unset.
    if (names[f.num]) {
      if (str(f)) md[names[f.num]] = str(f);
    } else if (f.num === 7) {
      if (f.varint) md.generation = Number(f.varint);
    } else if (f.num === 11 || f.num === 12) {
      const [k, v] = mapEntry(f);
      ((md[f.num === 11 ? 'labels' : 'annotations'] ??= {}) as Record<string, string>)[k] = v.toString('utf8');
    } else if (f.num === 13 || f.num === 14 || f.num === 17) throw unsupported(`ObjectMeta field ${f.num}`);
    // selfLink 4, the timestamps 8 and 9 and deletionGracePeriodSeconds 10: the server's own.
  }
  return md;
}

function configMap(buf: Buffer): Record<string, unknown> {
  const cm: Record<string, any> = { apiVersion: 'v1', kind: 'ConfigMap' };
  for (const f of fields(buf)) {
    if (f.num === 1) cm.metadata = objectMeta(f.bytes ?? Buffer.alloc(0));
    else if (f.num === 2 || f.num === 3) {
      const [k, v] = mapEntry(f);
      if (f.num === 2) (cm.data ??= {})[k] = v.toString('utf8');
      else (cm.binaryData ??= {})[k] = v.toString('base64');
    } else if (f.num === 4) cm.immutable = f.varint !== 0n;
    else throw unsupported(`ConfigMap field ${f.num}`);
  }
  return cm;
}

/** The object of a protobuf request body. */
export function decodeProtobufObject(body: Buffer): Record<string, unknown> {
  if (!body.subarray(0, 4).equals(MAGIC)) throw new ApiError(400, 'BadRequest', 'unable to decode the request body: no protobuf envelope ("k8s\\0")');
  let apiVersion = '';
  let kind = '';
  let raw: Buffer = Buffer.alloc(0);
  for (const f of fields(body.subarray(4))) {
    if (f.num === 1) {
      for (const t of fields(f.bytes ?? Buffer.alloc(0))) {
        if (t.num === 1) apiVersion = str(t);
        else if (t.num === 2) kind = str(t);
      }
    } else if (f.num === 2) raw = f.bytes ?? Buffer.alloc(0);
  }
  if (apiVersion !== 'v1' || kind !== 'ConfigMap') throw unsupported(`${apiVersion} ${kind}`);
  return configMap(raw);
}
