"""The public API: `generate` (sources, spec strings and "auto" resolved here, then
`specjax.decoding.generate`) and the draft-spec grammar (`draft_spec`)."""
from specjax.api.draft_spec import lookup_first, register, resolve_drafter
from specjax.api.generate import encode_prompts, generate

__all__ = ["generate", "encode_prompts", "resolve_drafter", "lookup_first", "register"]
