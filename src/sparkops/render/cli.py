"""`sparkops render`: inventory + profile -> compose files, units, router and Ray configs."""

from __future__ import annotations

import argparse
import sys

from sparkops.render.write import render


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "render",
        help="write each host's serving files (what `deploy.yml` installs) without Ansible",
        description="Validate the inventory and model profile, then write OUT/<host>/ files "
        "from templates/: compose.yml, serving.env (0600), the systemd unit, and the LiteLLM "
        "config or Ray start script where the topology needs them.",
    )
    parser.add_argument("--inventory", required=True, help="inventory directory (hosts.yml)")
    parser.add_argument(
        "--out", required=True, help="output folder (created; one subfolder per host)"
    )
    parser.add_argument("--profile", help="model profile name or YAML path (default: inventory's)")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="the job's requests in flight, checked against max_num_seqs (default: the "
        "inventory's vllm_serving_concurrency, else unchecked)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rendered = render(args.inventory, args.out, profile=args.profile, concurrency=args.concurrency)
    for host, files in rendered.files.items():
        for file in files:
            print(f"{args.out}/{host}/{file.path}")
    for note in rendered.notes:
        print(note)
    for warning in rendered.warnings:
        print(f"sparkops: warning: {warning}", file=sys.stderr)
    return 0
