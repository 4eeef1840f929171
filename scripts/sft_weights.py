#!/usr/bin/env python3
"""How much each kind of task weighs in SFT under `[sft] loss_weighting = "batch"`.

The SFT batcher sorts examples by length and cuts them into batches of at most
`batch_tokens` tokens; each step's loss is the mean over its batch's agent tokens, so an
agent token in a batch with few of them (long prompts, short answers) weighs more than one
in a batch with many. This script rebuilds those batches from an expert data file and
prints, per task position in the chain and kind (write: saves a skill without using one;
reuse: calls a library skill), its share of the agent tokens, its share of the loss, and
its weight per agent token against `"token"` weighting (1.00: every agent token alike).

Token counts come from a Hugging Face tokenizer.json over each message's text, plus 5
tokens of ChatML framing per message (`<|im_start|>role\\n ... <|im_end|>\\n`), so the
batches come out within about 1% of the trainer's count. The figures hold for steps whose
gradient norm stays under `max_grad_norm`; a clipped step weighs the same either way.

    pip install tokenizers
    python3 scripts/sft_weights.py RUN_DIR/data/train.jsonl models/smollm2/tokenizer.json
"""

import argparse
import collections
import json

from tokenizers import Tokenizer

FRAMING_TOKENS = 5
# Of the framing, what the loss mask trains on an agent turn: its end token and newline.
AGENT_FRAMING_TRAINED = 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="expert trajectories (RUN_DIR/data/train.jsonl)")
    parser.add_argument("tokenizer", help="a Hugging Face tokenizer.json")
    parser.add_argument("--batch-tokens", type=int, default=8192, help="[sft] batch_tokens")
    args = parser.parse_args()

    tokenizer = Tokenizer.from_file(args.tokenizer)
    rows = [json.loads(line) for line in open(args.data, encoding="utf-8")]
    texts = [m["content"] for row in rows for m in row["messages"]]
    lengths = iter(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))

    # examples[i] = (tokens, agent tokens, kind)
    examples = []
    for row in rows:
        total = agent = 0
        for message in row["messages"]:
            length = next(lengths)
            total += length + FRAMING_TOKENS
            if message["role"] == "assistant" and message.get("weight", 1) != 0:
                agent += length + AGENT_FRAMING_TRAINED
        position = row["task_id"].rsplit("/", 1)[1]
        if row["used_skills"]:
            kind = "reuse"
        elif row["saved_skills"]:
            kind = "write"
        else:
            kind = "plain"
        examples.append((total, agent, f"{position} {kind}"))

    order = sorted(range(len(examples)), key=lambda i: (examples[i][0], i))
    batches, tokens = [], 0
    for i in order:
        if batches and tokens + examples[i][0] <= args.batch_tokens:
            batches[-1].append(i)
            tokens += examples[i][0]
        else:
            batches.append([i])
            tokens = examples[i][0]

    weight = {}
    shares = []
    for batch in batches:
        agent = sum(examples[i][1] for i in batch)
        shares.append(agent / sum(examples[i][0] for i in batch))
        for i in batch:
            weight[i] = 1.0 / agent
    all_agent = sum(e[1] for e in examples)
    uniform = len(batches) / all_agent

    by_kind = collections.defaultdict(lambda: [0, 0, 0.0])
    for i, (_, agent, kind) in enumerate(examples):
        entry = by_kind[kind]
        entry[0] += 1
        entry[1] += agent
        entry[2] += agent * weight[i]
    all_loss = sum(entry[2] for entry in by_kind.values())

    print(
        f"{len(examples)} examples, {len(batches)} batches of at most {args.batch_tokens} "
        f"tokens, agent share per batch {100 * min(shares):.0f}-{100 * max(shares):.0f}%"
    )
    print(f"{'task':10} {'examples':>8} {'agent tokens':>12} {'tokens %':>8} {'loss %':>7} {'weight':>7}")
    for kind in sorted(by_kind):
        count, agent, loss = by_kind[kind]
        print(
            f"{kind:10} {count:8} {agent:12} {100 * agent / all_agent:8.1f} "
            f"{100 * loss / all_loss:7.1f} {loss / agent / uniform:7.2f}"
        )


if __name__ == "__main__":
    main()
