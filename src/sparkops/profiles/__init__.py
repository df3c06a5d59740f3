"""Model profiles: YAML files beside this module, validated by pydantic and by `checks`.

`load_profile(name_or_path)` returns a validated `Profile`; `check_profile(...)` applies the
deployment-time rules (concurrency, memory budget, tokens) and raises one `UserError` that
lists every problem with its fix.
"""

from sparkops.profiles.checks import (
    DeployFacts,
    async_scheduling_flag,
    check_profile,
    profile_problems,
)
from sparkops.profiles.load import available_profiles, load_profile
from sparkops.profiles.schema import Profile, VllmArgs

__all__ = [
    "DeployFacts",
    "Profile",
    "VllmArgs",
    "async_scheduling_flag",
    "available_profiles",
    "check_profile",
    "load_profile",
    "profile_problems",
]
