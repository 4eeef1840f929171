"""Golden ChatML tokenisations made by Hugging Face's tokenizer and chat template.

The Rust test `trainer/tests/chatml_goldens.rs` tokenises the same conversations with
`sage_trainer::chat::ChatTemplate::from_messages` and checks that the token ids are
the ones `apply_chat_template` gives (then one tokenisation of the whole text), and
that the agent mask covers exactly the tokens that overlap an assistant message's
content, plus the `<|im_end|>` closing it.

Needs transformers and jinja2 (not torch):

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install transformers jinja2
    /tmp/hfenv/bin/python scripts/chatml_goldens.py

It reads `tests/goldens/chatml/{tokenizer.json,tokenizer_config.json}` (a small BPE
and the tokenizer config a checkpoint of this project carries) and rewrites
`tests/goldens/chatml/goldens.json`.
"""

import json
from pathlib import Path

from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = ROOT / "tests" / "goldens" / "chatml"

SYSTEM = "You are an agent. Answer with a ```python block."

# Contents whose edges or characters a piecewise tokenisation could split differently
# from one tokenisation of the rendered text.
AWKWARD = [
    "\nstarts with a newline",
    "\n\nstarts with two newlines",
    "  starts with spaces",
    " one space",
    "ends with a newline\n",
    "ends with spaces   ",
    "ends with newline and spaces \n  ",
    "\r\nwindows line ends\r\n",
    "\ttabbed\n\tlines",
    "unicode: caf\u00e9, na\u00efve, \u65e5\u672c\u8a9e, \U0001f600",
    "```python\nprint(apis.supervisor.show_profile())\n```",
    "",
    "\n",
]


def conversations():
    """(messages, add_generation_prompt) pairs: every awkward content as each role."""
    for text in AWKWARD:
        yield [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": text},
            {"role": "assistant", "content": text},
            {"role": "user", "content": "Output:\n" + text},
            {"role": "assistant", "content": "done" + text},
        ], False
        yield [
            {"role": "system", "content": text},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": text},
            {"role": "user", "content": text},
        ], True


def main():
    tok = AutoTokenizer.from_pretrained(GOLDENS)
    cases = []
    for messages, add_generation_prompt in conversations():
        text = tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = encoded["input_ids"]
        offsets = encoded["offset_mapping"]
        # Where each assistant content lies in the text, and its closing <|im_end|>.
        spans = []
        cursor = 0
        for message in messages:
            opening = "<|im_start|>" + message["role"] + "\n"
            start = text.index(opening, cursor) + len(opening)
            end = start + len(message["content"])
            assert text.startswith("<|im_end|>", end)
            if message["role"] == "assistant":
                spans.append((start, end + len("<|im_end|>")))
            cursor = end
        mask = [
            any(s < e_tok and b_tok < e for (s, e) in spans)
            for (b_tok, e_tok) in offsets
        ]
        if not add_generation_prompt:
            # A finished episode ends at its last <|im_end|>: drop the newline after it.
            assert tok.convert_ids_to_tokens(ids[-1]) == "\u010a"
            ids, mask = ids[:-1], mask[:-1]
        cases.append(
            {
                "messages": messages,
                "add_generation_prompt": add_generation_prompt,
                "ids": ids,
                "agent_mask": mask,
            }
        )
    out = GOLDENS / "goldens.json"
    out.write_text(json.dumps({"cases": cases}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(cases)} conversations to {out}")


if __name__ == "__main__":
    main()
