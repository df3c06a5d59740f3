"""The LiteLLM router's master key: kept across deploys, generated once.

Clients of the router hold this key, so a re-render or a re-deploy must keep the one a host
already has in router.env; only a first deploy generates one. Both paths ask this module:
`sparkops render` (render/write.py reads the output folder's router.env files) and the
litellm_router role (it slurps the host's router.env and calls the `sparkops_master_key`
filter in ansible/plugins/filter/sparkops_render.py). Pure: the callers do the reading.
"""

from __future__ import annotations

import secrets

from sparkops.render import envfile

ENV_NAME = "LITELLM_MASTER_KEY"


def stored_master_key(env_text: str) -> str:
    """The key a router.env holds ("" when it holds none)."""
    return envfile.read(env_text).get(ENV_NAME, "")


def new_master_key() -> str:
    """A fresh key: LiteLLM expects the sk- prefix; 32 random bytes, URL-safe."""
    return "sk-" + secrets.token_urlsafe(32)


def keep_or_generate(given: str = "", *stored_env_texts: str) -> str:
    """The key to render: the one given, else the first stored in a router.env, else a new one."""
    if given:
        return given
    for text in stored_env_texts:
        if key := stored_master_key(text):
            return key
    return new_master_key()
