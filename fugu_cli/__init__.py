"""fugu: a terminal coding assistant that is a team of LLMs behind one prompt, routed step by step."""

__version__ = "0.1.0"
