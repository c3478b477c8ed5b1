"""The store conformance suite: what a store must pass for the bases and capabilities it declares.

A store subclasses the bases of :mod:`nbdurable.durable.store` it implements
(:class:`~nbdurable.durable.store.HistoryStore`, and
:class:`~nbdurable.durable.store.RunStore` and :class:`~nbdurable.durable.store.EventLog`
when it keeps run records and an event log) and lists its
:class:`~nbdurable.durable.store.Capability` members. It proves itself with
this suite, which needs pytest (``import nbdurable`` never imports it): a test
module imports the suite's tests and fixtures and defines ``store``, a fresh
empty store per test (and optionally ``reopen``, another handle on the same
data, for the tests of persistence and racing handles)::

    import pytest
    from nbdurable.testing import *  # noqa: F403  (the suite: its tests and fixtures)

    from mypackage import MyStore


    @pytest.fixture
    def store(tmp_path):
        store = MyStore(tmp_path / "db")
        yield store
        store.close()


    @pytest.fixture
    def reopen(tmp_path):
        return lambda: MyStore(tmp_path / "db")

Each test skips a store that does not declare what it tests (run records:
``runtime``; the event log: ``events``; writes together: ``commit``), and fails
when a store declares a capability without honouring it. The bundled stores run the same suite
(``tests/stores/test_suite.py``).
"""

from ._checkpoints import (
    test_a_reopened_store_has_everything,
    test_bytes_round_trip,
    test_concurrent_runs_on_one_event_loop,
    test_empty_history_round_trips,
    test_history_lists_every_save_in_order_without_messages,
    test_latest_save_wins,
    test_list_orders_runs_by_creation,
    test_list_runs_summarises_each_run,
    test_load_by_step_returns_the_latest_save_at_that_step,
    test_several_store_instances_in_threads,
    test_store_calls_from_worker_threads,
    test_sync_use_from_plain_threads,
    test_the_loop_checkpoints_into_the_store_and_resumes,
    test_the_store_declares_history,
    test_unknown_run_is_empty,
)
from ._claims import (
    test_a_stale_owner_cannot_write_after_a_takeover,
    test_a_submitted_run_has_an_empty_log_until_deleted,
    test_concurrent_claims_take_every_run_once_in_session_order,
)
from ._commit import (
    committing,
    test_a_change_of_state_is_refused_before_anything_is_written,
    test_a_stale_fence_writes_nothing,
    test_everything_given_lands_together,
)
from ._events import (
    test_concurrent_appends_from_threads_keep_offsets_gap_free,
    test_delete_removes_the_log,
    test_offsets_start_at_one_have_no_holes_and_continue,
    test_the_log_survives_reopening,
    test_unknown_runs_raise_run_not_found,
)
from ._fixtures import (
    Reopen,
    event_store,
    reopen,
    require,
    runtime_store,
    store,
)
from ._late_results import (
    test_a_record_keeps_the_newest_late_results,
    test_a_stale_owner_adds_a_late_result_and_changes_nothing_else,
    test_racing_late_results_all_land,
)
from ._notices import (
    test_a_key_is_claimed_once_and_kept_on_the_record,
    test_racing_handles_claim_each_key_exactly_once,
)
from ._settling import (
    test_a_failure_cascade_is_settled_by_the_node_that_failed,
    test_a_node_claimed_in_the_same_millisecond_is_left_to_its_claimer,
    test_a_record_without_settled_by_is_attributed_by_its_time,
    test_only_the_last_dependency_to_finish_settles_a_node_in_the_same_millisecond,
)
from ._verdicts import (
    test_a_run_that_no_longer_waits_takes_no_verdict,
    test_a_second_verdict_loses_and_is_told_the_winner,
    test_a_verdict_is_recorded_while_the_run_waits,
    test_racing_handles_record_exactly_one_verdict,
    test_the_run_waits_until_every_pending_approval_has_a_verdict,
    test_the_same_verdict_again_is_a_repeat_not_a_conflict,
    test_the_winner_is_remembered_after_the_run_moved_on,
)

__all__ = [
    "Reopen",
    "committing",
    "event_store",
    "reopen",
    "require",
    "runtime_store",
    "store",
    "test_a_change_of_state_is_refused_before_anything_is_written",
    "test_a_failure_cascade_is_settled_by_the_node_that_failed",
    "test_a_key_is_claimed_once_and_kept_on_the_record",
    "test_a_node_claimed_in_the_same_millisecond_is_left_to_its_claimer",
    "test_a_record_keeps_the_newest_late_results",
    "test_a_record_without_settled_by_is_attributed_by_its_time",
    "test_a_reopened_store_has_everything",
    "test_a_run_that_no_longer_waits_takes_no_verdict",
    "test_a_second_verdict_loses_and_is_told_the_winner",
    "test_a_stale_fence_writes_nothing",
    "test_a_stale_owner_adds_a_late_result_and_changes_nothing_else",
    "test_a_stale_owner_cannot_write_after_a_takeover",
    "test_a_submitted_run_has_an_empty_log_until_deleted",
    "test_a_verdict_is_recorded_while_the_run_waits",
    "test_bytes_round_trip",
    "test_concurrent_appends_from_threads_keep_offsets_gap_free",
    "test_concurrent_claims_take_every_run_once_in_session_order",
    "test_concurrent_runs_on_one_event_loop",
    "test_delete_removes_the_log",
    "test_empty_history_round_trips",
    "test_everything_given_lands_together",
    "test_history_lists_every_save_in_order_without_messages",
    "test_latest_save_wins",
    "test_list_orders_runs_by_creation",
    "test_list_runs_summarises_each_run",
    "test_load_by_step_returns_the_latest_save_at_that_step",
    "test_offsets_start_at_one_have_no_holes_and_continue",
    "test_only_the_last_dependency_to_finish_settles_a_node_in_the_same_millisecond",
    "test_racing_handles_claim_each_key_exactly_once",
    "test_racing_handles_record_exactly_one_verdict",
    "test_racing_late_results_all_land",
    "test_several_store_instances_in_threads",
    "test_store_calls_from_worker_threads",
    "test_sync_use_from_plain_threads",
    "test_the_log_survives_reopening",
    "test_the_loop_checkpoints_into_the_store_and_resumes",
    "test_the_run_waits_until_every_pending_approval_has_a_verdict",
    "test_the_same_verdict_again_is_a_repeat_not_a_conflict",
    "test_the_store_declares_history",
    "test_the_winner_is_remembered_after_the_run_moved_on",
    "test_unknown_run_is_empty",
    "test_unknown_runs_raise_run_not_found",
]
