// The console's front-end: a router over the pages, links that stay in the page (history
// API), and the frame around every page. Every text from the store reaches the DOM through
// Preact's text nodes and attributes (escaped); nothing is parsed as HTML.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import "./style.css";
import { ComparePage } from "./pages/Compare";
import { ContextPage } from "./pages/Context";
import { ContextsPage } from "./pages/Contexts";
import { FindPage } from "./pages/Find";
import { NotFound } from "./pages/NotFound";
import { StorePage } from "./pages/Store";
import { TurnPage } from "./pages/Turn";
import { UsagePage } from "./pages/Usage";
import { type MeAnswer, get } from "./api";
import { useLoad } from "./load";
import { navigate } from "./router";


function useLocation() {
  const [location, setLocation] = useState(window.location.pathname + window.location.search);
  useEffect(() => {
    const changed = () => setLocation(window.location.pathname + window.location.search);
    window.addEventListener("popstate", changed);
    return () => window.removeEventListener("popstate", changed);
  }, []);
  return location;
}

// Links to console paths stay in the page; any other link is the browser's.
document.addEventListener("click", (event) => {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  const anchor = (event.target as Element | null)?.closest?.("a");
  if (!anchor || anchor.target || anchor.hasAttribute("download")) return;
  const url = new URL(anchor.href, window.location.href);
  if (url.origin !== window.location.origin || url.pathname.startsWith("/api/")) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});

/** The tenant whose console this is, or null for the operator's (or while not known yet). */
type Tenant = string | null;

function Page({ location, tenant }: { location: string; tenant: Tenant }) {
  const url = new URL(location, window.location.origin);
  const parts = url.pathname.split("/").filter((part) => part !== "").map(decodeURIComponent);
  const query = url.searchParams;
  if (parts.length === 0) return <ContextsPage query={query} />;
  switch (parts[0]) {
    case "store":
      if (parts.length === 1) return tenant === null ? <StorePage /> : <UsagePage tenant={tenant} />;
      break;
    case "find":
      if (parts.length === 1) return <FindPage query={query} />;
      break;
    case "contexts":
      if (parts.length === 2) return <ContextPage reference={parts[1]} selected={Number(query.get("turn")) || null} />;
      break;
    case "turns":
      if (parts.length === 2) return <TurnPage turnId={parts[1]} asOf={query.get("as_of")} />;
      break;
    case "compare":
      if (parts.length === 3) return <ComparePage left={parts[1]} right={parts[2]} />;
      break;
  }
  return <NotFound what={`There is no page at ${url.pathname}.`} />;
}

function App() {
  const location = useLocation();
  const me = useLoad(() => get<MeAnswer>("/api/me"), []);
  const tenant: Tenant = me.state === "done" && me.value.viewer === "tenant" ? me.value.tenant : null;
  return (
    <>
      <header class="top">
        <a class="brand" href="/">
          ctxstore
        </a>
        <nav>
          <a href="/">Contexts</a>
          <a href="/find">Find</a>
          <a href="/store">{tenant === null ? "Store" : "Usage"}</a>
        </nav>
        {tenant !== null && (
          <span class="viewer" data-testid="viewer">
            tenant {tenant}
          </span>
        )}
        <form method="post" action="/logout" class="logout">
          <button type="submit">Log out</button>
        </form>
      </header>
      <main>
        {me.state === "loading" ? (
          <p class="loading">Loading…</p>
        ) : (
          <Page location={location} tenant={tenant} key={location} />
        )}
      </main>
    </>
  );
}

const root = document.getElementById("app");
if (root) render(<App />, root);
