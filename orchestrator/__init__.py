"""The turn pipeline: thread -> triage -> request -> handler -> response -> thread/audit."""
