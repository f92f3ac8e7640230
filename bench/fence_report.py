"""The markdown report of bench_fence.py: one validity table (dialect x mode, three arms) and one
speed table (batch 1)."""

from __future__ import annotations

ARMS = ("fence", "fence+spec", "no fence")


def share(valid: int, total: int) -> str:
    return f"{valid}/{total} ({100 * valid / total:.0f}%)" if total else "-"


def cell(row: dict | None) -> str:
    if row is None:
        return "-"
    return share(row["valid"], row["must_hold"])


def validity_table(rows: list[dict]) -> list[str]:
    by_key = {(r["dialect"], r["mode"], r["arm"]): r for r in rows}
    lines = ["| dialect | mode | prompts (fence / spec / off) | valid, fence | valid, fence+spec | valid, no fence "
             "| plain text (fence / off) | canonical, fence | fence us/step p50 / p99 | tok/s (batch) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    dialects = list(dict.fromkeys(r["dialect"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    for dialect in dialects:
        totals = {arm: [0, 0, 0] for arm in ARMS}  # valid, must hold, outputs
        for mode in modes:
            arm_rows = {arm: by_key.get((dialect, mode, arm)) for arm in ARMS}
            fence, off = arm_rows["fence"], arm_rows["no fence"]
            for arm, row in arm_rows.items():
                if row is not None:
                    totals[arm][0] += row["valid"]
                    totals[arm][1] += row["must_hold"]
                    totals[arm][2] += row["outputs"]
            counts = " / ".join(str(r["outputs"]) if r else "0" for r in arm_rows.values())
            plain = f"{fence['plain_text'] if fence else '-'} / {off['plain_text'] if off else '-'}"
            canon = share(fence["canonical"], fence["outputs"]) if fence else "-"
            cost = f"{fence['fence_us_p50']:.0f} / {fence['fence_us_p99']:.0f}" if fence else "-"
            speed = f"{fence['tokens_per_s']:.0f} / {off['tokens_per_s']:.0f}" if fence and off else "-"
            lines.append(f"| {dialect} | {mode} | {counts} | {cell(fence)} | {cell(arm_rows['fence+spec'])} | "
                         f"{cell(off)} | {plain} | {canon} | {cost} | {speed} |")
        counts = " / ".join(str(totals[arm][2]) for arm in ARMS)
        lines.append(f"| **{dialect}** | **all** | **{counts}** | **{share(*totals['fence'][:2])}** | "
                     f"**{share(*totals['fence+spec'][:2])}** | **{share(*totals['no fence'][:2])}** | | | | |")
    return lines


def speed_table(rows: list[dict]) -> list[str]:
    lines = ["| arm (batch 1, chatml_json required) | prompts | decode tok/s | fence us/step p50 / p99 "
             "| fence share of forward |", "|---|---|---|---|---|"]
    for row in rows:
        fenced = row["arm"] != "no fence"
        cost = f"{row['fence_us_p50']:.0f} / {row['fence_us_p99']:.0f}" if fenced else "-"
        part = f"{100 * row['fence_share_of_forward']:.1f}%" if fenced and row["fence_share_of_forward"] else "-"
        lines.append(f"| {row['arm']} | {row['prompts']} | {row['tokens_per_s']:.1f} | {cost} | {part} |")
    return lines


def max_tokens(rows: list[dict]) -> str:
    limits = dict.fromkeys(f"{r['dialect']} {r['max_tokens']}" for r in rows)
    return ", ".join(limits) + " (the longest shortest call of each dialect fits)"


def markdown(rows: list[dict], speeds: list[dict], context: dict) -> str:
    args = context["args"]
    load = ", ".join(f"{x:.2f}" for x in context["load_before"])
    after = ", ".join(f"{x:.2f}" for x in context["load_after"])
    head = [f"## Fence bench ({context['date']})", "",
            f"SmolLM2-135M-Instruct (embedded GGUF, {args['dtype']}), {context['cores']} cores, "
            f"{context['threads']} torch threads; load average before {load}, after {after}; "
            f"max_tokens {args['max_tokens'] or max_tokens(rows)}, batch {args['batch']}, speculation: n-gram drafts of "
            f"{args['speculative']}; one call per request (no parallel calls); half the prompts greedy, half sampled at temperature 0.7; "
            f"wall {context['wall_s'] / 60:.1f} min.", "",
            "valid = calls (or JSON answers) that parse with the dialect's parser and validate against "
            "their schema, over outputs that must hold one (auto: outputs that attempted a call). "
            "canonical = outputs whose tokens are the tokenizer's own split of their text. "
            "tok/s (batch) = fence / no fence, whole-batch decode rate.", ""]
    return "\n".join(head + validity_table(rows) + [""] + speed_table(speeds) + [""])
