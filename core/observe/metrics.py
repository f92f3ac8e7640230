"""Server metrics on one prometheus registry per app (tests build several apps in one process).

Names follow vLLM's where one exists (``vllm:`` prefix), with ``kvgate_`` twins so that both
vLLM dashboards and kvgate's own work.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("kvgate_requests", "Finished requests by finish reason", ["reason"], registry=r)
        self.vllm_requests = Counter("vllm:request_success", "Finished requests (vLLM name)",
                                     ["finished_reason"], registry=r)
        self.prompt_tokens = Counter("kvgate_prompt_tokens", "Prompt tokens by source", ["source"], registry=r)
        self.vllm_prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens (vLLM name)", registry=r)
        self.generation_tokens = Counter("kvgate_generation_tokens", "Generated tokens", registry=r)
        self.vllm_generation_tokens = Counter("vllm:generation_tokens", "Generated tokens (vLLM name)", registry=r)
        self.ttft = Histogram("kvgate_time_to_first_token_seconds", "Time to first token", buckets=LATENCY_BUCKETS,
                              registry=r)
        self.vllm_ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token (vLLM name)",
                                   buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("kvgate_inter_token_latency_seconds", "Time between tokens", buckets=LATENCY_BUCKETS,
                             registry=r)
        self.vllm_itl = Histogram("vllm:inter_token_latency_seconds", "Time between tokens (vLLM name)",
                                  buckets=LATENCY_BUCKETS, registry=r)
        self.guard_interventions = Counter("kvgate_guard_interventions", "Generation guard interventions",
                                           registry=r)
        self.guard_stops = Counter("kvgate_guard_stops", "Replies a generation guard ended (a loop), not the model",
                                   registry=r)
        self.draft_tokens = Counter("kvgate_spec_decode_draft_tokens", "Speculative draft tokens proposed",
                                    registry=r)
        self.vllm_draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Draft tokens (vLLM name)", registry=r)
        self.accepted_tokens = Counter("kvgate_spec_decode_accepted_tokens", "Speculative draft tokens accepted",
                                       registry=r)
        self.vllm_accepted_tokens = Counter("vllm:spec_decode_num_accepted_tokens", "Accepted draft tokens (vLLM name)",
                                            registry=r)
        self.overloaded_requests = Counter("kvgate_requests_overloaded",
                                           "Requests refused with 503 because the queue was full or the server draining",
                                           registry=r)
        self.parse_issues = Counter("kvgate_tool_parse_issues", "Malformed tool calls reported by the dialect parser",
                                    registry=r)

    def request_finished(self, reason: str, prompt: int, device: int, ssd: int, generated: int,
                         interventions: int, issues: int) -> None:
        self.requests.labels(reason).inc()
        self.vllm_requests.labels(reason).inc()
        self.prompt_tokens.labels("computed").inc(max(prompt - device - ssd, 0))
        self.prompt_tokens.labels("device").inc(device)
        self.prompt_tokens.labels("ssd").inc(ssd)
        self.vllm_prompt_tokens.inc(prompt)
        self.generation_tokens.inc(generated)
        self.vllm_generation_tokens.inc(generated)
        self.guard_interventions.inc(interventions)
        self.parse_issues.inc(issues)

    def guard_stopped(self) -> None:
        self.guard_stops.inc()

    def overloaded(self) -> None:
        self.overloaded_requests.inc()

    def drafts(self, drafted: int, accepted: int) -> None:
        self.draft_tokens.inc(drafted)
        self.vllm_draft_tokens.inc(drafted)
        self.accepted_tokens.inc(accepted)
        self.vllm_accepted_tokens.inc(accepted)

    def first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)
        self.vllm_ttft.observe(seconds)

    def next_token(self, seconds: float) -> None:
        self.itl.observe(seconds)
        self.vllm_itl.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
