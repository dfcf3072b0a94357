"""Traffic: every file of requests infertune reads, in one place, with one set of errors.

- `texts`: texts to embed (tune, inspect, export, serve's ceiling): JSONL {"input"|"text"|"prompt": ...} or plain
  lines; the built-in sample.
- `chat`: chat/completions requests (causal-LM tune, calibration, export): OpenAI's JSONL shapes or plain prompts;
  the built-in chat sample.
- `bodies`: request bodies for bench and validate, from a file or a synthetic length spec, pre-encoded.
- `lengths`: prompt/output token counts for plan, from counts in the file or the model's tokenizer.
- `buckets`: token-length buckets and the stratified calibration/eval split.
- `source`: reading the file, and the errors: each names the file (and line), what is wrong and what to do.
"""
