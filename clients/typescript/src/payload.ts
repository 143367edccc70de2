/**
 * Payload bytes as read from the wire: BLAKE3 (the store's BlobHash), zstd inflation within
 * bounds, and the checks of decision 0015 — a ZSTD payload is always inflated and hashed (the
 * server never hashed the bytes it inflates to), a RAW payload is hashed unless it came from a
 * server on a loopback address (the server hashed those bytes itself a moment before; the
 * kernel's copy is all that stands between), its length is always checked.
 */

import { Decompress } from "fzstd";
import { createBLAKE3 } from "hash-wasm";

import { IntegrityError, ProtocolError } from "./errors.js";
import { FRAME_BYTES_LIMIT, PayloadEncoding, type PayloadRecord } from "./protocol.js";

// BLAKE3 from hash-wasm: WebAssembly shipped inside the npm package (no native addon, nothing
// downloaded), 397 MB/s on 10 KiB against @noble/hashes' 38 MB/s in pure JavaScript on the
// same machine (decision 0021): a client that hashes every payload it reads from a remote
// server cannot spend 17 ms of CPU on a 640 KiB page. One hasher, used synchronously
// (init, update, digest in one call): nothing interleaves on the one JavaScript thread.
const hasher = await createBLAKE3();

/** BLAKE3-256 of `data`: a BlobHash. */
export function blobHash(data: Uint8Array): Uint8Array {
  return hasher.init().update(data).digest("binary");
}

/** BLAKE3 of no bytes: the `payloadHash` of a redacted turn. */
export const EMPTY_HASH: Uint8Array = blobHash(new Uint8Array(0));

export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const byte of bytes) out += byte.toString(16).padStart(2, "0");
  return out;
}

/** A BlobHash from 64 hex characters or 32 bytes. */
export function parseHash(hash: string | Uint8Array): Uint8Array {
  if (typeof hash === "string") {
    if (!/^[0-9a-fA-F]{64}$/.test(hash)) throw new RangeError(`a BlobHash is 64 hex characters, not ${JSON.stringify(hash)}`);
    const out = new Uint8Array(32);
    for (let i = 0; i < 32; i++) out[i] = parseInt(hash.slice(2 * i, 2 * i + 2), 16);
    return out;
  }
  if (!(hash instanceof Uint8Array) || hash.length !== 32) throw new RangeError("a BlobHash is 32 bytes");
  return hash;
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * The frame content size a zstd frame header declares: -1 when it declares none. Throws
 * IntegrityError when `data` does not start with a zstd frame header (RFC 8878 §3.1.1).
 */
export function zstdContentSize(data: Uint8Array): number {
  if (data.length < 5 || data[0] !== 0x28 || data[1] !== 0xb5 || data[2] !== 0x2f || data[3] !== 0xfd) {
    throw new IntegrityError("zstd payload has no valid frame header");
  }
  const descriptor = data[4]!;
  const fcsFlag = descriptor >> 6;
  const singleSegment = (descriptor >> 5) & 1;
  const dictFlag = descriptor & 3;
  const fcsBytes = fcsFlag === 0 ? singleSegment : 1 << fcsFlag;
  if (fcsBytes === 0) return -1;
  const at = 5 + (singleSegment ? 0 : 1) + (dictFlag === 3 ? 4 : dictFlag);
  if (data.length < at + fcsBytes) throw new IntegrityError("zstd payload has a truncated frame header");
  let size = 0;
  for (let i = fcsBytes - 1; i >= 0; i--) size = size * 256 + data[at + i]!;
  return fcsBytes === 2 ? size + 256 : size;
}

/**
 * Inflates a zstd frame that must hold exactly `rawLen` bytes. Memory stays bounded by
 * `rawLen` whatever the frame claims: a declared size other than `rawLen` is refused before
 * inflating, and the output is counted as it comes (one byte more than `rawLen` stops it).
 */
export function inflate(data: Uint8Array, rawLen: number): Uint8Array {
  if (rawLen > FRAME_BYTES_LIMIT) throw new IntegrityError(`zstd payload claims ${rawLen} bytes, above any server's limit`);
  const declared = zstdContentSize(data);
  if (declared >= 0 && declared !== rawLen) {
    throw new IntegrityError(`zstd frame declares ${declared} bytes, raw_len is ${rawLen}`);
  }
  const out = new Uint8Array(rawLen);
  let total = 0;
  let over = false;
  const stream = new Decompress((chunk) => {
    if (total + chunk.length > rawLen) {
      over = true;
      throw new IntegrityError(`zstd payload inflates to more than ${rawLen} bytes, raw_len is ${rawLen}`);
    }
    out.set(chunk, total);
    total += chunk.length;
  });
  try {
    stream.push(data, true);
  } catch (error) {
    if (error instanceof IntegrityError) throw error;
    throw new IntegrityError(`zstd payload does not inflate: ${(error as Error).message}`);
  }
  if (over || total !== rawLen) {
    throw new IntegrityError(`zstd payload inflates to ${total} bytes, raw_len is ${rawLen}`);
  }
  return out;
}

/**
 * The checked bytes of a PAYLOAD: RAW as sent, ZSTD inflated (only if it was accepted). The
 * length must match `expectedLen` (when given) and the hash must match `expectedHash` for a
 * ZSTD payload always, for a RAW one when `hashRaw` (decision 0015), else IntegrityError.
 */
export function payloadBytes(
  payload: PayloadRecord,
  expectedHash: Uint8Array,
  expectedLen: number | undefined,
  acceptZstd: boolean,
  hashRaw: boolean,
  what: string,
): Uint8Array {
  let data: Uint8Array;
  let hashed: boolean;
  if (payload.encoding === PayloadEncoding.RAW) {
    data = payload.data;
    hashed = hashRaw;
  } else if (payload.encoding === PayloadEncoding.ZSTD) {
    if (!acceptZstd) throw new ProtocolError(`${what}: a zstd payload the request did not accept`);
    data = inflate(payload.data, payload.rawLen);
    hashed = true;
  } else {
    throw new ProtocolError(`${what}: the payload is absent though it was requested`);
  }
  if (expectedLen !== undefined && data.length !== expectedLen) {
    throw new IntegrityError(`${what}: payload of ${data.length} bytes, the turn says ${expectedLen} bytes`);
  }
  if (hashed) {
    const actual = blobHash(data);
    if (!equalBytes(actual, expectedHash)) {
      throw new IntegrityError(`${what}: payload hash ${toHex(actual)} does not match ${toHex(expectedHash)}`);
    }
  }
  // A RAW payload is a view into the frame's buffer: give the caller its own bytes.
  return payload.encoding === PayloadEncoding.RAW ? data.slice() : data;
}
