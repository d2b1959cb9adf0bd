"""The text track (docs/concepts/pipeline.md): a character LM pretrained on public text drawn by λ, then
finetuned with user-level DP-SGD on the sensitive speeches; scored by held-out-user perplexity."""
