#!/usr/bin/env python3
"""A toy environment served over HTTP in the protocol SAGE's remote environments speak
(AppWorld's environment server; see docs/remote-env.md). Standard library only: copy it
and replace the toy world with yours.

    python3 examples/python_env_server.py --port 8000

The toy world: each task hands the agent a list of numbers and asks for one statistic
of it (the sum, the largest, the count of even ones, ...). The three tasks of a scenario
ask for the same statistic of different lists, so a function written for the first task
is worth reusing in the next two. The agent answers with
`apis.supervisor.complete_task(answer=...)`.

Agent code runs with Python's `exec` in a namespace kept across the episode's turns:
fine for a toy and for trusted experiments, not for untrusted models (a real server
runs agent code in a sandbox, as `sage serve-world` does).
"""

import argparse
import contextlib
import io
import json
import os
import random
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import unquote

STATISTICS = {
    "sum": ("the sum of", sum),
    "max": ("the largest of", max),
    "min": ("the smallest of", min),
    "evens": ("how many are even among", lambda xs: sum(1 for x in xs if x % 2 == 0)),
    "range": ("the difference between the largest and the smallest of", lambda xs: max(xs) - min(xs)),
}
SPLIT_SEEDS = {"train": 0, "iid": 1000, "dev": 2000, "test-normal": 3000, "test-challenge": 4000}
SCENARIOS_PER_SPLIT = 10
TASKS_PER_SCENARIO = 3


def scenarios(split):
    """The split's scenarios: [{"id", "template", "tasks": [{"id", "instruction", "numbers", "statistic"}]}]."""
    if split not in SPLIT_SEEDS:
        return None
    out = []
    for k in range(SCENARIOS_PER_SPLIT):
        rng = random.Random(SPLIT_SEEDS[split] + k)
        statistic = sorted(STATISTICS)[k % len(STATISTICS)]
        wording = STATISTICS[statistic][0]
        scenario_id = f"{split}-{statistic}-{k}"
        tasks = []
        for i in range(TASKS_PER_SCENARIO):
            numbers = [rng.randint(1, 99) for _ in range(rng.randint(4, 8))]
            tasks.append({
                "id": f"{scenario_id}_{i + 1}",
                "instruction": f"Report {wording} these numbers: {numbers}.",
                "numbers": numbers,
                "statistic": statistic,
            })
        out.append({"id": scenario_id, "template": f"toy_{statistic}", "tasks": tasks})
    return out


TASKS = {task["id"]: task for split in SPLIT_SEEDS for s in scenarios(split) for task in s["tasks"]}


class Supervisor:
    """The one app of the toy world."""

    def __init__(self, episode):
        self._episode = episode

    def complete_task(self, answer=None):
        self._episode["answer"] = answer
        self._episode["completed"] = True
        return "task completed"


class Apis:
    def __init__(self, episode):
        self.supervisor = Supervisor(episode)


class World:
    """One episode at a time, like an AppWorld environment server."""

    def __init__(self):
        self.episode = None

    def initialize(self, body):
        task = TASKS.get(body.get("task_id"))
        if task is None:
            raise KeyError(f"unknown task {body.get('task_id')}")
        self.episode = {"task": task, "answer": None, "completed": False}
        self.episode["namespace"] = {"apis": Apis(self.episode)}
        return {"task_id": task["id"], "instruction": task["instruction"]}

    def current(self, body):
        if self.episode is None or self.episode["task"]["id"] != body.get("task_id"):
            raise LookupError(f"task {body.get('task_id')} is not initialized")
        return self.episode

    def execute(self, body):
        episode = self.current(body)
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(body.get("code", ""), episode["namespace"])
        except Exception:
            return "Execution failed. Traceback:\n" + traceback.format_exc(limit=-1)
        return printed.getvalue()

    def evaluate(self, body):
        episode = self.current(body)
        task = episode["task"]
        expected = STATISTICS[task["statistic"]][1](task["numbers"])
        checks = {"completed": episode["completed"], "answer": episode["answer"] == expected}
        passes = [name for name, ok in checks.items() if ok]
        failures = [{"name": name} for name, ok in checks.items() if not ok]
        return {"success": not failures, "pass_count": len(passes), "num_tests": len(checks),
                "passes": passes, "failures": failures}


WORLD = World()


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/scenarios/"):
            listed = scenarios(unquote(self.path[len("/scenarios/"):]))
            if listed is None:
                return self.reply(404, {"detail": f"unknown split in {self.path}"})
            public = [{"id": s["id"], "template": s["template"],
                       "tasks": [{"id": t["id"], "instruction": t["instruction"]} for t in s["tasks"]]}
                      for s in listed]
            return self.reply(200, {"output": public})
        if self.path.startswith("/tasks/"):
            task = TASKS.get(unquote(self.path[len("/tasks/"):]))
            if task is None:
                return self.reply(404, {"detail": f"unknown task in {self.path}"})
            return self.reply(200, {"output": {"task_id": task["id"], "instruction": task["instruction"]}})
        return self.reply(404, {"detail": f"{self.path}: not served"})

    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as e:
            return self.reply(422, {"detail": f"the body is not JSON: {e}"})
        routes = {
            "/initialize": WORLD.initialize,
            "/execute": WORLD.execute,
            "/task_completed": lambda b: WORLD.current(b)["completed"],
            "/evaluate": WORLD.evaluate,
            "/close": lambda b: None,
            "/close_all": lambda b: None,
        }
        route = routes.get(self.path)
        if route is None:
            return self.reply(404, {"detail": f"{self.path}: not served"})
        try:
            return self.reply(200, {"output": route(body)})
        except KeyError as e:
            return self.reply(404, {"detail": str(e.args[0])})
        except LookupError as e:
            return self.reply(409, {"detail": str(e)})

    def log_message(self, *args):
        pass


def exit_with_parent():
    """Ends the process once the one that started it is gone."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--exit-with-parent", action="store_true",
                        help="exit when the process that started this one ends")
    args = parser.parse_args()
    if args.exit_with_parent:
        threading.Thread(target=exit_with_parent, daemon=True).start()
    server = HTTPServer((args.host, args.port), Handler)
    # The port bound, so that --port 0 announces the one the system chose.
    print(f"serving the toy world on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
