// In-console navigation: paths change with the history API, the page is not reloaded.

/** Goes to an in-console path without reloading the page. */
export function navigate(path: string) {
  if (path === window.location.pathname + window.location.search) return;
  window.history.pushState(null, "", path);
  window.dispatchEvent(new PopStateEvent("popstate"));
}
