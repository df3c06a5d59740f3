"""Witness of vLLM's own KV-cache layout (GPU runs only; put this folder first on PYTHONPATH).

vLLM logs the KV-cache token count and concurrency at start, not the groups behind them. This
wraps `vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups` when the engine imports it
and appends what vLLM decided to $KVHOOK_LOG (JSON lines): per group its spec class, block size
in tokens, page bytes, layer count, window, KV heads and head sizes; then the block count and
the bytes it was given. Nothing else changes.
"""

import importlib.abc
import json
import os
import sys

_TARGET = "vllm.v1.core.kv_cache_utils"


def _describe(spec):
    keys = (
        "block_size",
        "page_size_bytes",
        "sliding_window",
        "num_kv_heads",
        "head_size",
        "head_size_v",
        "dtype",
        "attention_chunk_size",
    )
    out = {"spec": type(spec).__name__}
    for k in keys:
        v = getattr(spec, k, None)
        if v is not None:
            out[k] = str(v) if k == "dtype" else v
    return out


def _patch(mod):
    orig = mod.get_kv_cache_config_from_groups

    def wrapped(vllm_config, kv_cache_groups, available_memory):
        cfg = orig(vllm_config, kv_cache_groups, available_memory)
        row = {
            "available_memory": available_memory,
            "num_blocks": cfg.num_blocks,
            "groups": [
                {
                    **_describe(g.kv_cache_spec),
                    "layers": len(g.layer_names),
                    "first_layer": g.layer_names[0] if g.layer_names else None,
                }
                for g in kv_cache_groups
            ],
            "tensors": len(cfg.kv_cache_tensors),
        }
        try:
            with open(os.environ.get("KVHOOK_LOG", "/tmp/kvhook.jsonl"), "a") as fh:
                fh.write(json.dumps(row) + "\n")
        except OSError:
            pass
        return cfg

    mod.get_kv_cache_config_from_groups = wrapped


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())


def _chain():
    """Run the sitecustomize this one shadows (the machine's own), if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        cand = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") != here and os.path.isfile(cand):
            with open(cand) as fh:
                exec(compile(fh.read(), cand, "exec"), {"__name__": "_sitecustomize_chained"})
            return


_chain()
