"""The LLM catalogue: upstream connections, model aliases, the model list and the agent config."""
