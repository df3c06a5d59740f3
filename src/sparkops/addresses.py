"""Where a client on the serving host itself reaches a server bound to an address.

One rule for every reader: the rendered container health check (sparkops.render.stack), the
deploy's health probe (the `sparkops_render` filter's health_url) and the playbooks' vLLM URL
(the `sparkops_vllm_url` filter behind sparkops_defaults_vllm_url). A server bound to loopback
or to every interface answers on 127.0.0.1; one bound to a private address (a data-parallel
replica's link address) answers only there. IPv6 addresses are bracketed, as URLs need.
Pure: no I/O, no third-party imports, so an Ansible filter can use it with nothing installed.
"""

from __future__ import annotations

# Bind addresses a local client reaches on 127.0.0.1 ("" and None: nothing set).
LOOPBACK_BINDS = frozenset({"127.0.0.1", "0.0.0.0", "::", "::1", "localhost", ""})


def local_base_url(bind_address: str | None, port: int) -> str:
    """`http://host:port` (no trailing slash) of the server bound to `bind_address`:`port`,
    as seen from its own host."""
    address = "" if bind_address is None else str(bind_address).strip()
    if address in LOOPBACK_BINDS:
        address = "127.0.0.1"
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"
