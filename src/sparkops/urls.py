"""A server's base URL and the routes the kit asks it, built by parts (urllib.parse).

One rule for every reader that turns an endpoint into a request URL (`pipeline check`, the
/tokenize and /v1/models calls of `openai_http`, `metrics.scrape.fetch_metrics`): the route
joins the base's path and the base's query string stays at the end. String concatenation
put the route after the query (`http://h:8000?x=1` + `/metrics` -> `...?x=1/metrics`: the
server's root, asked with a query that swallowed the route). Pure, standard library only,
so the lowest layers (metrics) can use it.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def server_root(url: str) -> str:
    """`url` without a trailing `/` or `/v1` of its path: `http://h:8000/v1/?x=1` ->
    `http://h:8000?x=1`. The query stays; a fragment is dropped (a client never sends it)."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit(parts._replace(path=path, fragment=""))


def api_url(base: str, route: str) -> str:
    """The URL of `route` (`/metrics`, `/v1/models`) on the server at `base`, the base's query
    string kept at the end: `http://h:8000?x=1` + `/metrics` -> `http://h:8000/metrics?x=1`."""
    parts = urlsplit(base.strip())
    path = parts.path.rstrip("/") + "/" + route.lstrip("/")
    return urlunsplit(parts._replace(path=path, fragment=""))
