export function NotFound({ what }: { what: string }) {
  return (
    <section class="not-found" data-testid="not-found">
      <h1>Not found</h1>
      <p>{what}</p>
      <p>
        <a href="/">Back to the contexts</a>
      </p>
    </section>
  );
}
