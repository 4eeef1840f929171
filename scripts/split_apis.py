#!/usr/bin/env python3
"""Which APIs each held-out template of the built-in world calls that no training
template's solution calls: what a model fine-tuned on the training templates' expert
trajectories has never seen used, and can only find by reading the API docs. Given an
evaluation report (`sage eval --out FILE`), also what the agent did on each template:
tasks passed, tasks that read the docs, tasks that called each unseen API, and the calls
of APIs the world does not have (invented names), and what the agent did on the turn
after its first error: completed the task (gave up) or tried again.

Reads the split lists in envs/src/scenarios/splits.rs and the skill bodies in
envs/src/scenarios/skills/*.star (each template's solution); the login and supervisor
calls every solution makes come from the expert's code and are not in the bodies.

    python3 scripts/split_apis.py                    # dev, test-normal and test-challenge
    python3 scripts/split_apis.py --report eval.json # and the agent's calls, per template
"""

import argparse
import json
import pathlib
import re
import sys
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "envs" / "src" / "scenarios"
SPLITS = {"dev": "DEV", "test-normal": "TEST_NORMAL", "test-challenge": "TEST_CHALLENGE"}
APPS = ROOT / "envs" / "src" / "world" / "apps"
DOCS_CALL = re.compile(r"apis\.api_docs\.show_(?:api_doc|api_descriptions)\(")
COMPLETE_CALL = re.compile(r"apis\.supervisor\.complete_task\(")
EXPERT = ROOT / "envs" / "src" / "expert" / "mod.rs"


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


def world_apis():
    """Every `app.api` name of the built-in world: each app file's `api("name", ...)`
    entries, and the login and logout every app but the supervisor and the docs has."""
    names = set()
    for path in APPS.glob("*.rs"):
        app = path.stem
        if app == "mod":
            continue
        names |= {f"{app}.{api}" for api in re.findall(r'\bapi\(\s*"(\w+)"', path.read_text())}
        if app not in ("supervisor", "api_docs"):
            names |= {f"{app}.login", f"{app}.logout"}
    return names


def template_of(task_id, templates):
    """The template of a report's task id (`SPLIT/TEMPLATE/SEED/tN`), if it names one."""
    parts = task_id.split("/")
    return parts[1] if len(parts) > 1 and parts[1] in templates else None


def error_labels():
    """The labels that start an observation's last line when it reports an error, as the
    expert reads them (`ERROR_LABELS` in envs/src/expert/mod.rs)."""
    match = re.search(r"ERROR_LABELS: \[&str; \d+\] = \[(.*?)\];", EXPERT.read_text(), re.S)
    if not match:
        sys.exit(f"no ERROR_LABELS in {EXPERT}")
    return tuple(re.findall(r'"([^"]+)"', match.group(1)))


def is_error(observation, labels):
    """Whether a turn's observation reports an error: its last non-empty line starts with
    one of `labels`, as the expert decides."""
    lines = [line for line in observation.splitlines() if line.strip()]
    return bool(lines) and lines[-1].startswith(labels)


def after_first_error(turns, labels):
    """What the turn after a task's first error did: `None` (no error, or none after it),
    `"gave up"` (it completed the task), `"mended"` (its code ran without error) or
    `"failed again"`."""
    errors = [i for i, turn in enumerate(turns) if is_error(turn["observation"], labels)]
    if not errors or errors[0] + 1 == len(turns):
        return None
    turn = turns[errors[0] + 1]
    if COMPLETE_CALL.search(turn["agent"]):
        return "gave up"
    return "failed again" if is_error(turn["observation"], labels) else "mended"


def report_table(path, seen, templates, world, labels):
    """Per split of the report at `path` and per template: tasks, passed, tasks that read
    the docs, tasks that call each API unseen in training, and invented API names."""
    try:
        report = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"cannot read the evaluation report {path}: {e}")
    for entry in report:
        split = entry["metrics"]["split"]
        print(f"\n{split} ({entry['metrics']['mode']}), from {path}:")
        rows = {}
        for task in entry["tasks"]:
            template = template_of(task["task_id"], templates) or "(unknown template)"
            code = "\n".join(turn["agent"] for turn in task["turns"])
            called = set(re.findall(r"apis\.(\w+\.\w+)", code))
            row = rows.setdefault(
                template,
                {"tasks": 0, "passed": 0, "docs": 0, "unseen": {}, "invented": set(), "after error": Counter()},
            )
            row["tasks"] += 1
            row["passed"] += task["passed"]
            row["docs"] += bool(DOCS_CALL.search(code))
            for api in sorted(api_calls(template) - seen) if template in templates else []:
                row["unseen"][api] = row["unseen"].get(api, 0) + (api in called)
            row["invented"] |= called - world
            outcome = after_first_error(task["turns"], labels)
            if outcome:
                row["after error"][outcome] += 1
        for template, row in rows.items():
            unseen = ", ".join(f"{api} {n}" for api, n in row["unseen"].items()) or "-"
            invented = ", ".join(sorted(row["invented"])) or "-"
            after = ", ".join(f"{what} {n}" for what, n in sorted(row["after error"].items())) or "-"
            print(f"  {template:32} {row['passed']:2}/{row['tasks']:<2} passed, docs read in {row['docs']:2};"
                  f" unseen APIs called: {unseen}; invented: {invented}; after the first error: {after}")
        totals = sum((row["after error"] for row in rows.values()), Counter())
        print("  after the first error, all templates: " + (", ".join(f"{w} {n}" for w, n in sorted(totals.items())) or "-"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", action="append", default=[], help="a `sage eval --out` JSON report (repeatable)")
    args = parser.parse_args()
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
    if args.report:
        templates = train + [t for constant in SPLITS.values() for t in split_templates(source, constant)]
        world = world_apis()
        labels = error_labels()
        for path in args.report:
            report_table(path, seen, templates, world, labels)


if __name__ == "__main__":
    main()
