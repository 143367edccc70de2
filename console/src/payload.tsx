// A payload as people read it: JSON pretty-printed, text as text, images as images, other
// bytes as a hex dump; the size, and what was cut. All of it text nodes: nothing runs.
import type { PayloadView } from "./api";
import { humanBytes } from "./api";

/** The text a payload shows (JSON pretty-printed when it parses). */
export function payloadText(payload: PayloadView): string | null {
  if (payload.text === undefined) return null;
  if (payload.kind === "json" && !payload.truncated) {
    try {
      return JSON.stringify(JSON.parse(payload.text), null, 2);
    } catch {
      return payload.text;
    }
  }
  return payload.text;
}

export function hexDump(base64: string): string {
  const bytes = Uint8Array.from(atob(base64), (character) => character.charCodeAt(0));
  const lines: string[] = [];
  for (let offset = 0; offset < bytes.length; offset += 16) {
    const row = bytes.subarray(offset, offset + 16);
    const hex = Array.from(row, (byte) => byte.toString(16).padStart(2, "0")).join(" ");
    const ascii = Array.from(row, (byte) => (byte >= 0x20 && byte < 0x7f ? String.fromCharCode(byte) : ".")).join("");
    lines.push(`${offset.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join("\n");
}

export function PayloadBox({ turnId, payload, asOf }: { turnId: number; payload: PayloadView; asOf: number | null }) {
  const size = humanBytes(payload.bytes);
  const text = payloadText(payload);
  return (
    <div class="payload" data-testid="payload" data-kind={payload.kind}>
      <p class="payload-head">
        {payload.kind === "empty" ? "No payload" : `${payload.kind}, ${size} (${payload.bytes} bytes)`}
        {payload.truncated && (
          <span class="truncated" data-testid="truncated">
            {" "}
            — truncated: showing the first {humanBytes(payload.shown_bytes)} of {size}
          </span>
        )}
      </p>
      {text !== null && <pre>{text}</pre>}
      {payload.kind === "image" && (
        <img
          src={`/api/turns/${turnId}/payload${asOf !== null ? `?as_of=${asOf}` : ""}`}
          alt={`the payload of turn ${turnId} (${payload.media_type})`}
        />
      )}
      {payload.base64 !== undefined && <pre class="hex">{hexDump(payload.base64)}</pre>}
    </div>
  );
}
