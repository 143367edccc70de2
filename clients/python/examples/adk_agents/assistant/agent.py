"""A minimal ADK agent; its sessions and artifacts live in ctxstore (see ../services.py)."""

from google.adk.agents import Agent

root_agent = Agent(
    name="assistant",
    model="gemini-2.0-flash",
    instruction="Answer briefly. Remember what the user tells you.",
    output_key="last_answer",  # a session state change on every answer
)
