"""Model builders: declare a whole model's pass on a PersistentKernel from a Hugging Face model (qwen3)."""
