/**
 * A least-recently-used map of verified blobs by hex hash, bounded by the bytes of its values
 * (a blob larger than `itemBytesMax` is not kept). The LangGraph.js checkpointer and store
 * share it: a blob is immutable under its hash, so a cached one is never stale.
 */
export class BlobCache {
  private readonly map = new Map<string, Uint8Array>();
  private bytes = 0;

  constructor(
    private readonly bytesMax: number,
    private readonly itemBytesMax: number,
  ) {}

  get(hex: string): Uint8Array | undefined {
    const data = this.map.get(hex);
    if (data !== undefined) {
      this.map.delete(hex);
      this.map.set(hex, data);
    }
    return data;
  }

  set(hex: string, data: Uint8Array): void {
    if (data.length > this.itemBytesMax || this.map.has(hex)) return;
    this.map.set(hex, data);
    this.bytes += data.length;
    for (const [key, value] of this.map) {
      if (this.bytes <= this.bytesMax) break;
      this.map.delete(key);
      this.bytes -= value.length;
    }
  }
}
