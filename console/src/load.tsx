// Loading an API answer into a page: the answer, an error, or still loading.
import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError } from "./api";
import { NotFound } from "./pages/NotFound";

export type Loaded<T> = { state: "loading" } | { state: "done"; value: T } | { state: "failed"; error: ApiError };

export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [loaded, setLoaded] = useState<Loaded<T>>({ state: "loading" });
  useEffect(() => {
    let current = true;
    setLoaded({ state: "loading" });
    load().then(
      (value) => current && setLoaded({ state: "done", value }),
      (error) =>
        current &&
        setLoaded({
          state: "failed",
          error: error instanceof ApiError ? error : new ApiError(0, "NETWORK", String(error)),
        }),
    );
    return () => {
      current = false;
    };
  }, deps);
  return loaded;
}

/** Draws `loaded`: its value through `children`, a 404 as the not-found page, other errors. */
export function Show<T>({ loaded, children }: { loaded: Loaded<T>; children: (value: T) => ComponentChildren }) {
  if (loaded.state === "loading") return <p class="loading">Loading…</p>;
  if (loaded.state === "failed") {
    if (loaded.error.status === 404) return <NotFound what={loaded.error.message} />;
    return (
      <p class="error" role="alert">
        {loaded.error.code}: {loaded.error.message}
      </p>
    );
  }
  return <>{children(loaded.value)}</>;
}
