"""A base URL and a route, built by parts (sparkops.urls): the query string stays at the end
(issue 37 item 7: `pipeline check` asked `http://h:8000/v1?x=1/metrics`)."""

from __future__ import annotations

import pytest

from sparkops.metrics.scrape import fetch_metrics
from sparkops.openai_http import normalise_base
from sparkops.urls import api_url, server_root


@pytest.mark.parametrize(
    ("base", "route", "url"),
    [
        ("http://h:8000", "/metrics", "http://h:8000/metrics"),
        ("http://h:8000/", "metrics", "http://h:8000/metrics"),
        ("http://h:8000?x=1", "/metrics", "http://h:8000/metrics?x=1"),
        ("http://h:8000/proxy/?a=1&b=2", "/v1/models", "http://h:8000/proxy/v1/models?a=1&b=2"),
        ("https://u:p@h/gw?k=v#frag", "/tokenize", "https://u:p@h/gw/tokenize?k=v"),
    ],
)
def test_the_route_joins_the_path_and_the_query_stays_at_the_end(base, route, url):
    assert api_url(base, route) == url


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("http://h:8000/v1", "http://h:8000"),
        ("http://h:8000/v1/?x=1", "http://h:8000?x=1"),
        (" http://h:8000/gw/v1?x=1#f ", "http://h:8000/gw?x=1"),
        ("http://h:8000/v1x", "http://h:8000/v1x"),  # only a whole /v1 segment
    ],
)
def test_server_root_drops_v1_and_keeps_the_query(given, root):
    assert server_root(given) == root


def test_normalise_base_keeps_a_query_string_after_v1():
    assert normalise_base("http://h:8000/v1?x=1") == "http://h:8000?x=1"
    assert normalise_base("http://h:8000/v1/?x=1#top") == "http://h:8000?x=1"


def test_a_route_before_a_query_is_still_named():
    """`.../v1/models?x=1` copied from a curl line: the route is found before the query."""
    from sparkops.errors import UserError

    with pytest.raises(UserError, match=r"names an API route \(/v1/models\)") as err:
        normalise_base("http://h:8000/v1/models?x=1")
    assert str(err.value).endswith("give the server's base URL, http://h:8000?x=1")


def test_fetch_metrics_asks_metrics_with_the_query_after_it(fault_server):
    snapshot = fetch_metrics(f"{fault_server.url}/v1?x=1")
    assert fault_server.paths["/metrics"] == 1
    assert "prompt_tokens" in snapshot.found
