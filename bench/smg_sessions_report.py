"""The summary of ``bench_smg_sessions.py``: per setup the hit ratio against the ceiling, the device /
SSD split, sessions moved, median TTFT; for the kill setup each moved session's restore share."""

from __future__ import annotations

import statistics


def setup_summary(rows: list[dict]) -> dict:
    prompt = sum(r["prompt_tokens"] for r in rows)
    device, ssd = sum(r["cached_device"] for r in rows), sum(r["cached_ssd"] for r in rows)
    ideal = sum(r["ceiling_tokens"] for r in rows)
    later = [r["ttft_s"] for r in rows if r["turn"] > 1]
    return {"requests": len(rows), "prompt_tokens": prompt, "cached_tokens": device + ssd, "ceiling_tokens": ideal,
            "hit_ratio": (device + ssd) / prompt, "ceiling_ratio": ideal / prompt,
            "hit_over_ceiling": (device + ssd) / ideal if ideal else 0.0,
            "device_ratio": device / prompt, "ssd_ratio": ssd / prompt,
            "moves": sum(r["moved"] for r in rows), "workers_used": len({r["worker"] for r in rows}),
            "retried_requests": sum(r["attempts"] > 1 for r in rows),
            "median_ttft_s": statistics.median(r["ttft_s"] for r in rows),
            "median_ttft_turn2plus_s": statistics.median(later) if later else None,
            "moved_after_kill": [moved_session(r) for r in rows if r["after_kill"]]}


def moved_session(row: dict) -> dict:
    previous = row["previous_prompt_tokens"]
    return {"session": row["session"], "turn": row["turn"], "previous_prompt_tokens": previous,
            "cached_ssd": row["cached_ssd"], "cached_device": row["cached_device"],
            "ceiling_tokens": row["ceiling_tokens"], "ssd_share": row["cached_ssd"] / previous,
            "ssd_of_ceiling": row["cached_ssd"] / row["ceiling_tokens"], "ttft_s": row["ttft_s"]}


def summarize(rows: list[dict]) -> dict[str, dict]:
    names = list(dict.fromkeys(r["setup"] for r in rows))
    return {name: setup_summary([r for r in rows if r["setup"] == name]) for name in names}


def markdown(summary: dict[str, dict]) -> list[str]:
    base = summary.get("single")
    lines = ["| setup | hit ratio | vs single (points) | ceiling | hit / ceiling | device | SSD | workers used "
             "| moves | median TTFT (s) | median TTFT turns 2+ (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in summary.items():
        delta = f"{100 * (s['hit_ratio'] - base['hit_ratio']):+.1f}" if base else "-"
        later = f"{s['median_ttft_turn2plus_s']:.3f}" if s["median_ttft_turn2plus_s"] is not None else "-"
        lines.append(f"| {name} | {s['hit_ratio']:.1%} | {delta} | {s['ceiling_ratio']:.1%} | {s['hit_over_ceiling']:.1%} "
                     f"| {s['device_ratio']:.1%} | {s['ssd_ratio']:.1%} | {s['workers_used']} | {s['moves']} | {s['median_ttft_s']:.3f} | {later} |")
    for name, s in summary.items():
        for m in s["moved_after_kill"]:
            lines.append(f"{name}: session {m['session']} moved to the survivor at turn {m['turn']}: {m['cached_ssd']} "
                         f"tokens from SSD = {m['ssd_share']:.1%} of its previous prompt ({m['previous_prompt_tokens']}), "
                         f"{m['ssd_of_ceiling']:.1%} of its ceiling ({m['ceiling_tokens']}); {m['cached_device']} from "
                         f"device; TTFT {m['ttft_s']:.3f} s")
        if s["retried_requests"]:
            lines.append(f"{name}: {s['retried_requests']} request(s) retried after a failure through SMG")
    return lines
