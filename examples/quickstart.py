"""A durable agent run that stops for a human and resumes with a signed verdict.

Runs offline on the ScriptedModel and the embedded default store:
    python examples/quickstart.py           # approve the drop
    python examples/quickstart.py --deny    # deny it: the model keeps the table
"""

import asyncio
import sys
import tempfile

import nbdurable as nd

dropped: list[str] = []


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    dropped.append(name)
    return f"dropped {name}"


@nd.tool
def list_tables(prefix: str = "stg_") -> list[str]:
    """List warehouse tables whose name starts with a prefix."""
    return [t for t in ["stg_2023", "stg_2024", "orders"] if t.startswith(prefix)]


def summary(request: nd.ModelRequest) -> str:
    """The last turn reads drop_table's result: a denial is an error result with the reason."""
    result = request.messages[-1].tool_results[0]
    if result.is_error:
        return f"Denied ({result.result}), so I kept stg_2023 and dropped nothing."
    return "Done: dropped stg_2023, kept stg_2024."


model = nd.ScriptedModel(
    [
        nd.Turn.call("list_tables", "Let me look at the staging tables.", prefix="stg_"),
        nd.Turn.call("drop_table", "stg_2023 is stale; dropping it.", name="stg_2023"),
        summary,
    ],
    stream_delay=0.05,
)


async def main(deny: bool) -> None:
    # The embedded default: one SQLite file keeping every checkpoint of every run.
    workdir = tempfile.mkdtemp()
    url = "sqlite:///" + workdir + "/runs.db"
    store = nd.open_store(url)
    signer = nd.ApprovalSigner.from_file(workdir + "/approval.key")

    # Leg 1: stream the run; it checkpoints every step and suspends on the gated call.
    stream = nd.stream_chat(
        model=model,
        messages=[nd.user("Clean up stale staging tables.")],
        tools=[list_tables, drop_table],
        session=nd.DurableSession(store, run_id="run-42"),
        approval_signer=signer,
    )
    print(f"run {stream.run_id} started")
    async for part in stream.full_stream:
        if part.type == "text-delta":
            print(part.delta, end="", flush=True)
        elif part.type == "tool-result":
            print(f"\n  <- {part.result.tool_name}: {part.result.result}")
        elif part.type == "tool-approval-request":
            print(f"\n  ?? approval needed: {part.request.tool_name}({part.request.input})")
    first = await stream.result()
    print(f"status={first.status}, checkpoints={[c.step_index for c in store.history('run-42')]}")

    # ...the kernel restarts; all we keep is the store and the request's token...
    store.close()
    store = nd.open_store(url)
    request = store.load("run-42").pending_approvals[0]
    if deny:  # a denial needs no token; the model reads the reason
        verdict = nd.ToolApprovalResponse(
            approval_id=request.approval_id, approved=False, reason="Keep it for the audit."
        )
    else:
        verdict = nd.ToolApprovalResponse(
            approval_id=request.approval_id, approved=True, token=request.token
        )

    # Leg 2: resume from the store with the verdict; an approved tool runs (its signed
    # token verified first), a denied one does not.
    done = await nd.resume_from_checkpoint(
        store,
        "run-42",
        model=model,
        tools=[list_tables, drop_table],
        approval_signer=signer,
        approval_responses=[verdict],
    )
    print(f"status={done.status} text={done.text!r}")
    print(f"dropped={dropped} steps={done.step_index + 1} tokens={done.total_usage.total_tokens}")
    assert dropped == ([] if deny else ["stg_2023"])
    assert done.status == "completed"


if __name__ == "__main__":
    asyncio.run(main(deny="--deny" in sys.argv[1:]))
