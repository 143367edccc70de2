from . import agent  # noqa: F401 - ADK finds root_agent here
