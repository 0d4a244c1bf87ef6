"""The developer's kit: what a developer runs against an application, never a turn itself.

- `app`: loading an application from `module:attr` (`--app`), and the default database;
- `conversation_tests`: the engine of `frontdesk test` (YAML conversations, JUnit XML);
- `replay`: re-running recorded turns with other prompts or models (`audit replay`);
- `doubles`: in-memory doubles of what a handler is given (`frontdesk.testing`).

The kit sits on the orchestrator and nothing below imports it: the service and the CLI use
`app`, tests use the rest. The offline stand-in model and the model doubles
(`FunctionModel`, `ScriptedModel`) stay in `experts.providers`: `model="offline"` and the
replay of recorded answers run through them.
"""
