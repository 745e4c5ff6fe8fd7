// The slot of a key: which of the 16,384 slots (and so which Raft group of a
// sharded cluster) holds (namespace, key). The server's function
// (storage/storage_key.h SlotOf), pinned for every client by the shared
// vectors in tests/vectors/slot.json: FNV-1a 64 over the UTF-8 namespace,
// one 0x00 byte and the UTF-8 key, modulo 16384.

export const SLOT_COUNT = 16384;

// 16384 divides 2^32, and the low 32 bits of an FNV-1a 64 hash depend only
// on the low 32 bits of the offset basis and prime (a product's low half
// depends only on the factors' low halves; xor is bitwise): so this keeps
// those 32 bits alone, exactly, in Math.imul's 32-bit arithmetic.
const FNV64_OFFSET_LOW = 0x84222325; // of 0xcbf29ce484222325
const FNV64_PRIME_LOW = 0x000001b3; // of 0x00000100000001b3

function mix(h: number, bytes: Uint8Array): number {
  for (const byte of bytes) h = Math.imul(h ^ byte, FNV64_PRIME_LOW) >>> 0;
  return h;
}

/** The slot (0..16383) of (namespace, key). */
export function slotOf(namespace: string, key: string): number {
  let h = mix(FNV64_OFFSET_LOW, Buffer.from(namespace, 'utf8'));
  h = mix(h, SEPARATOR);
  h = mix(h, Buffer.from(key, 'utf8'));
  return h % SLOT_COUNT;
}

const SEPARATOR = new Uint8Array([0]);
