"""ADK loads this file before it builds its services: it claims the ctxstore:// scheme.

    adk web --session_service_uri ctxstore://127.0.0.1:7411 \
            --artifact_service_uri ctxstore://127.0.0.1:7411 examples/adk_agents
"""

from ctxstore.adk import register

register()
