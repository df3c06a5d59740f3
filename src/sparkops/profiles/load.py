"""Find and parse profile YAML files (the I/O edge of the profiles package)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from sparkops.errors import UserError
from sparkops.inputs import read_yaml
from sparkops.profiles.schema import Profile

PROFILE_DIR = Path(__file__).parent


def available_profiles() -> list[str]:
    """Names of the profiles shipped with the kit, sorted."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def _describe(err: ValidationError) -> str:
    parts = []
    for item in err.errors():
        where = ".".join(str(x) for x in item["loc"]) or "(top level)"
        if item["type"] == "extra_forbidden":
            parts.append(f"unknown key '{where}' (remove it or fix its spelling)")
        else:
            parts.append(f"'{where}': {item['msg']}")
    return "; ".join(parts)


def parse_profile(data: object, source: str) -> Profile:
    """Validate already-parsed YAML; errors name the source and each bad key."""
    if not isinstance(data, dict):
        raise UserError(
            f"profile {source}: expected a mapping of settings, got {type(data).__name__}"
        )
    try:
        return Profile.model_validate(data)
    except ValidationError as err:
        raise UserError(
            f"profile {source}: {_describe(err)}. Fix the profile file; the schema is "
            "sparkops/profiles/schema.py."
        ) from None


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a shipped profile by name, or any profile file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise UserError(
            f"profile '{name_or_path}' not found. Use one of: {', '.join(available_profiles())}"
            ", or a path to a profile YAML file."
        )
    data = read_yaml(
        path,
        what="profile",
        fix="fix the profile file (the schema is sparkops/profiles/schema.py)",
    )
    profile = parse_profile(data, str(name_or_path))
    if path.parent == PROFILE_DIR and profile.name != path.stem:
        raise UserError(f"profile file {path.name} declares name '{profile.name}': make them match")
    return profile
