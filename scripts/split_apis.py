#!/usr/bin/env python3
"""Which APIs each held-out template of the built-in world calls that no training
template's solution calls: what a model fine-tuned on the training templates' expert
trajectories has never seen used, and can only find by reading the API docs.

Reads the split lists in envs/src/scenarios/splits.rs and the skill bodies in
envs/src/scenarios/skills/*.star (each template's solution); the login and supervisor
calls every solution makes come from the expert's code and are not in the bodies.

    python3 scripts/split_apis.py            # dev, test-normal and test-challenge
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "envs" / "src" / "scenarios"
SPLITS = {"dev": "DEV", "test-normal": "TEST_NORMAL", "test-challenge": "TEST_CHALLENGE"}


def split_templates(source, constant):
    """The template names of one `const NAME: &[&str] = &[...]` list of splits.rs."""
    found = re.search(r"const %s: &\[&str\] = &\[(.*?)\];" % constant, source, re.S)
    if found is None:
        sys.exit(f"splits.rs has no list {constant}")
    return re.findall(r'"([a-z_]+)"', found.group(1))


def api_calls(template):
    """The `app.api` names a template's skill body calls."""
    body = SCENARIOS / "skills" / f"{template}.star"
    if not body.is_file():
        sys.exit(f"no skill body for template {template}: {body}")
    return set(re.findall(r"apis\.(\w+\.\w+)", body.read_text()))


def main():
    source = (SCENARIOS / "splits.rs").read_text()
    train = split_templates(source, "TRAIN")
    seen = set().union(*(api_calls(t) for t in train))
    print(f"{len(train)} training templates call {len(seen)} APIs")
    for split, constant in SPLITS.items():
        templates = split_templates(source, constant)
        unseen_count = 0
        print(f"\n{split}:")
        for template in templates:
            unseen = sorted(api_calls(template) - seen)
            unseen_count += bool(unseen)
            print(f"  {template:32} {', '.join(unseen) if unseen else '(every API seen in train)'}")
        print(f"  {unseen_count} of {len(templates)} templates call an API no training template calls")


if __name__ == "__main__":
    main()
