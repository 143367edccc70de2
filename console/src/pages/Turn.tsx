import { TurnDetails } from "../turn";
import { NotFound } from "./NotFound";

export function TurnPage({ turnId, asOf }: { turnId: string; asOf: string | null }) {
  const id = Number(turnId);
  if (!Number.isSafeInteger(id) || id <= 0) return <NotFound what={`"${turnId}" is not a TurnID.`} />;
  const view = asOf === null || asOf === "" ? null : Number(asOf);
  return (
    <section>
      <TurnDetails turnId={id} asOf={view !== null && Number.isSafeInteger(view) ? view : null} />
    </section>
  );
}
