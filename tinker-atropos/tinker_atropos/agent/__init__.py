"""Multi-turn tool-calling (agentic) environments: tool-call parsing, per-rollout sandboxes,
Hermes-compatible tools, and the agent loop that ties them to Atropos."""
