"""Inventory + model profile -> each host's serving files, through the templates in templates/.

`plan_stack` (pure) decides what runs where; `render_host` (pure) turns that into text;
`render_inventory` is the I/O edge used by `sparkops render`. The Ansible filter plugin
`sparkops_render` calls the same functions, so both paths produce identical files.
"""

from sparkops.render.stack import HostStack, plan_stack
from sparkops.render.templates import RenderedFile, render_host
from sparkops.render.write import render_inventory

__all__ = ["HostStack", "RenderedFile", "plan_stack", "render_host", "render_inventory"]
