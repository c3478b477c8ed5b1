"""Structured output (``output_type``) in the loop, the streams and the runtime,
and the opt-in retry predicate that uses the model errors' classification."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel

import nbdurable as nd
from nbdurable.runtime import DurableRuntime, ModelRetry


class Verdict(BaseModel):
    table: str
    stale: bool
    days_unused: int


GOOD = Verdict(table="stg_2023", stale=True, days_unused=400)


@nd.tool
def lookup(table: str) -> dict[str, Any]:
    """Look a table up."""
    return {"table": table, "last_read_days": 400}


async def test_generate_text_validates_the_final_answer_into_the_type() -> None:
    model = nd.ScriptedModel(
        [nd.Turn.call("lookup", table="stg_2023"), nd.Turn(output=GOOD)], keep_requests=None
    )
    result = await nd.generate_text(
        model=model, messages="Is stg_2023 stale?", tools=[lookup], output_type=Verdict
    )
    assert result.output == GOOD and isinstance(result.output, Verdict)
    assert result.text == GOOD.model_dump_json()
    assert len(model.requests) == 2
    for request in model.requests:  # every call carries the schema
        assert request.output_schema == Verdict.model_json_schema()
        assert request.output_name == "Verdict"
    plain = await nd.generate_text(model=nd.ScriptedModel(["hi"]), messages="x")
    assert plain.output is None and model.requests[0].output_schema is not None


async def test_an_answer_that_does_not_validate_is_a_model_error() -> None:
    model = nd.ScriptedModel(['{"table": "stg_2023", "stale": "maybe"}'])
    with pytest.raises(nd.OutputValidationError, match="stale") as caught:
        await nd.generate_text(model=model, messages="x", output_type=Verdict)
    assert caught.value.retryable is True
    assert isinstance(caught.value, nd.ModelError)
    assert "maybe" in caught.value.output


@dataclasses.dataclass
class Point:
    x: int
    y: int


async def test_dataclasses_work_and_non_objects_are_refused() -> None:
    result = await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn(output={"x": 1, "y": 2})]), messages="x", output_type=Point
    )
    assert result.output == Point(1, 2)
    with pytest.raises(nd.ConfigurationError, match="JSON object"):
        await nd.generate_text(model=nd.ScriptedModel(["1"]), messages="x", output_type=int)


@pytest.mark.spec("S003-31")
async def test_no_text_streams_before_the_output_validates(tmp_path: Any) -> None:
    """With structured output no text is shown before validation; the
    validated answer arrives with model_completed (a failed attempt shows nothing)."""
    store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
    model = nd.ScriptedModel([nd.Turn(output=GOOD)], stream_delay=0.001)
    stream = nd.stream_chat(
        model=model,
        messages="Is stg_2023 stale?",
        tools=[lookup],
        output_type=Verdict,
        session=nd.DurableSession(store, run_id="so"),
    )
    deltas = [p.delta async for p in stream.full_stream if p.type == "text-delta"]
    assert deltas == [GOOD.model_dump_json()]  # one piece, after validation
    assert await stream.output == GOOD
    events = store.read_events("so")
    kinds = [e.type for e in events if e.type.startswith("model_")]
    assert kinds == ["model_attempt_started", "model_delta", "model_completed"]
    completed = next(e for e in events if e.type == "model_completed")
    assert completed.payload["response"]["content"][0]["text"] == GOOD.model_dump_json()

    # A stream whose answer fails validation shows no text at all.
    bad = nd.ScriptedModel(['{"table": 1}'], stream_delay=0.001)
    failing = nd.stream_chat(
        model=bad,
        messages="x",
        tools=[lookup],
        output_type=Verdict,
        session=nd.DurableSession(store, run_id="bad"),
    )
    parts = [p async for p in failing.full_stream]
    assert not [p for p in parts if p.type == "text-delta"]
    assert parts[-1].type == "error" and parts[-1].error_type == "OutputValidationError"
    kinds = [e.type for e in store.read_events("bad") if e.type.startswith("model_")]
    assert kinds == ["model_attempt_started", "model_attempt_failed"]
    store.close()


async def test_structured_output_survives_suspend_and_resume() -> None:
    store = nd.InMemorySessionStore()
    signer = nd.ApprovalSigner("s")
    gated = nd.tool(lambda table: f"dropped {table}", name="drop", needs_approval=True)
    model = nd.ScriptedModel([nd.Turn.call("drop", table="stg_2023"), nd.Turn(output=GOOD)])
    first = await nd.generate_text(
        model=model,
        messages="x",
        tools=[gated],
        output_type=Verdict,
        session=nd.DurableSession(store, run_id="r"),
        approval_signer=signer,
    )
    assert first.status == "suspended" and first.output is None
    (request,) = first.pending_approvals
    done = await nd.resume_from_checkpoint(
        store,
        "r",
        model=model,
        tools=[gated],
        output_type=Verdict,
        approval_signer=signer,
        approval_responses=[
            nd.ToolApprovalResponse(
                approval_id=request.approval_id, approved=True, token=request.token
            )
        ],
    )
    assert done.output == GOOD
    again = await nd.resume_from_checkpoint(store, "r", model=model, output_type=Verdict)
    assert again.output == GOOD  # a completed run's answer validates again on resume


async def test_the_runtime_retries_an_invalid_answer_and_returns_the_output() -> None:
    model = nd.ScriptedModel(['{"table": "stg_2023"}', nd.Turn(output=GOOD)], mode="sequential")
    agent = nd.Agent(
        "judge",
        model,
        version="1",
        output_type=Verdict,
        model_retry=ModelRetry(max_attempts=3, initial_delay_ms=1, max_delay_ms=1),
    )
    async with DurableRuntime(store=nd.open_store("memory://"), agents=[agent]) as runtime:
        run = await runtime.submit("judge", "Is stg_2023 stale?")
        result = await run.result()
        assert result.output == GOOD
        assert model.calls == 2  # the invalid answer, then the valid one
        events = [e async for e in run.stream() if e.type == "run_state"]
        assert "retry_wait" in [e.payload["state"] for e in events]


class FailingModel(nd.ScriptedModel):
    """Raises the given errors on its first calls, then answers."""

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__(["done"] * 5, mode="sequential")
        self.errors = list(errors)
        self.attempts = 0

    async def generate(self, request: Any) -> Any:
        self.attempts += 1
        if self.errors:
            raise self.errors.pop(0)
        return await super().generate(request)

    def stream(self, request: Any) -> Any:
        # a streaming call fails the same way: the agents stream by default
        if self.errors:
            self.attempts += 1
            raise self.errors.pop(0)
        self.attempts += 1
        return super().stream(request)


async def test_retry_if_is_retryable_fails_at_once_on_errors_a_retry_cannot_fix() -> None:
    retry = ModelRetry(max_attempts=3, initial_delay_ms=1, max_delay_ms=1)
    bad_key = FailingModel(
        [nd.AuthenticationError("invalid x-api-key", provider="test", status_code=401)]
    )
    busy = FailingModel([nd.RateLimitError("slow down", provider="test", status_code=429)])
    agents = [
        nd.Agent("strict", bad_key, version="1", model_retry=retry, retry_if=nd.is_retryable),
        nd.Agent("patient", busy, version="1", model_retry=retry, retry_if=nd.is_retryable),
        nd.Agent(
            "seed",
            FailingModel([nd.InvalidRequestError("bad", provider="t")]),
            version="1",
            model_retry=retry,
        ),
    ]
    async with DurableRuntime(store=nd.open_store("memory://"), agents=agents) as runtime:
        strict = await runtime.submit("strict", "x")
        record = await strict.wait()
        assert (record.state, record.reason) == ("failed", "model_error")
        assert "AuthenticationError: invalid x-api-key" in (record.error or "")
        assert bad_key.attempts == 1  # not retried
        patient = await runtime.submit("patient", "x")
        assert (await patient.result()).text == "done"
        assert busy.attempts == 2  # retried once
        seed = await runtime.submit("seed", "x")
        assert (await seed.result()).text == "done"  # without retry_if every error counts


def test_is_retryable_follows_the_classification() -> None:
    assert nd.is_retryable(nd.RateLimitError("x", provider="p"))
    assert nd.is_retryable(nd.ProviderUnavailableError("x", provider="p", status_code=529))
    assert nd.is_retryable(nd.ProviderTimeoutError("x", provider="p"))
    assert nd.is_retryable(nd.OutputValidationError("x"))
    assert nd.is_retryable(RuntimeError("unclassified"))
    assert not nd.is_retryable(nd.InvalidRequestError("x", provider="p", status_code=400))
    assert not nd.is_retryable(nd.AuthenticationError("x", provider="p", status_code=401))
    assert nd.ProviderError("x", provider="p", retryable=False).retryable is False


def test_agents_validate_output_type_and_retry_if() -> None:
    with pytest.raises(nd.ConfigurationError):
        nd.Agent("a", nd.ScriptedModel([]), version="1", output_type=int).validate()
    with pytest.raises(nd.ConfigurationError, match="retry_if"):
        nd.Agent("a", nd.ScriptedModel([]), version="1", retry_if=42).validate()  # type: ignore[arg-type]
    one = nd.Agent("a", nd.ScriptedModel([]), version="1", output_type=Verdict)
    two = nd.Agent("a", nd.ScriptedModel([]), version="1", output_type=Point)
    assert one.fingerprint() != two.fingerprint()
