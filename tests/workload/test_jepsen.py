"""The Jepsen history export: one operation per line, a set workload closed by a read."""

from pytest_pgha.workload.jepsen import element, jepsen_history
from pytest_pgha.workload.ledger import LedgerEntry
from pytest_pgha.workload.records import Outcome, TxRecord


def entry(worker, seq, outcome, start_us, end_us):
    return LedgerEntry(
        TxRecord(worker, seq, start_us, end_us, outcome), seq, None, None, None, None, None
    )


def test_each_transaction_is_an_invoke_and_its_completion_in_time_order():
    entries = [
        entry(0, 1, Outcome.OK, 1_000, 1_500),
        entry(1, 1, Outcome.INDETERMINATE, 1_200, 2_000),
        entry(0, 2, Outcome.FAILED, 1_600, 1_700),
    ]
    lines = jepsen_history(entries, {(0, 1), (1, 1)}).splitlines()
    a, b = element(0, 1), element(1, 1)
    assert (a, b) == (1, 1_000_000_001)
    assert lines[:3] == [
        f"{{:process 0, :type :invoke, :f :add, :value {a}, :time 0}}",
        f"{{:process 1, :type :invoke, :f :add, :value {b}, :time 200000}}",
        f"{{:process 0, :type :ok, :f :add, :value {a}, :time 500000}}",
    ]
    kinds = [line.split(":type ")[1].split(",")[0] for line in lines]
    assert kinds.count(":info") == 1 and kinds.count(":fail") == 1
    assert lines[-1] == (
        f"{{:process -1, :type :ok, :f :read, :value #{{{a} {b}}}, :time 1000002}}"
    )


def test_an_empty_trial_has_no_history():
    assert jepsen_history([], set()) == ""


def test_after_an_unknown_outcome_the_worker_goes_on_as_a_new_process():
    entries = [
        entry(0, 1, Outcome.INDETERMINATE, 1_000, 2_000),
        entry(1, 1, Outcome.OK, 1_000, 1_100),
        entry(0, 2, Outcome.OK, 2_500, 2_600),
    ]
    lines = jepsen_history(entries, set()).splitlines()
    later = [line for line in lines if f":value {element(0, 2)}," in line]
    assert all(line.startswith("{:process 2,") for line in later), later
