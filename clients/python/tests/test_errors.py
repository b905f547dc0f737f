"""lockd.errors: every reason lockd can send has its own class, decoded from
the grpc-status-details-bin trailer, never from the message."""

from __future__ import annotations

import grpc
import pytest

from lockd import errors
from lockd._gen.lock.v1 import lock_pb2
from lockd._gen.rpcstatus import status_pb2


class Answer(grpc.RpcError):
    def __init__(self, code, message, trailing):
        super().__init__(message)
        self._code, self._message, self._trailing = code, message, trailing

    def code(self):
        return self._code

    def details(self):
        return self._message

    def trailing_metadata(self):
        return self._trailing


def answer(reason: str, code=grpc.StatusCode.FAILED_PRECONDITION, message="m", metadata=None,
           domain=errors.DOMAIN) -> Answer:
    st = status_pb2.Status(code=code.value[0], message=message)
    if reason is not None:
        d = st.details.add()
        d.type_url = "type.googleapis.com/google.rpc.ErrorInfo"
        d.value = status_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata or {}).SerializeToString()
    return Answer(code, message, [("grpc-status-details-bin", st.SerializeToString())])


def proto_reasons():
    return sorted(n[len("ERROR_REASON_"):] for n in lock_pb2.ErrorReason.keys() if n != "ERROR_REASON_UNSPECIFIED")


def test_every_reason_of_lock_v1_has_a_class_named_after_it():
    assert sorted(errors.REASONS) == proto_reasons()
    for reason, cls in errors.REASONS.items():
        assert cls.__name__.lower() == reason.replace("_", "").lower(), reason
        assert cls.__name__ in errors.__all__


@pytest.mark.parametrize("reason", proto_reasons())
def test_each_reason_decodes_to_its_class(reason):
    err = errors.from_rpc_error(answer(reason))
    assert type(err) is errors.REASONS[reason]
    assert err.reason == reason
    assert err.code is grpc.StatusCode.FAILED_PRECONDITION
    # Only UNAVAILABLE leaves the outcome unknown: the store may have written.
    assert err.definite is (reason != "UNAVAILABLE")
    assert isinstance(err, errors.UnknownOutcome if reason == "UNAVAILABLE" else errors.Refused)


def test_a_wait_timeout_is_also_held():
    err = errors.from_rpc_error(answer("WAIT_TIMEOUT", grpc.StatusCode.ABORTED))
    assert isinstance(err, errors.WaitTimeout) and isinstance(err, errors.Held)


@pytest.mark.parametrize("code", [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE,
                                  grpc.StatusCode.CANCELLED])
def test_an_answer_without_a_reason_is_an_unknown_outcome(code):
    err = errors.from_rpc_error(Answer(code, "connection reset", []))
    assert type(err) is errors.UnknownOutcome
    assert not err.definite and err.reason is None


def test_the_message_is_never_read():
    # The same message under two reasons: the reason decides.
    assert isinstance(errors.from_rpc_error(answer("LEAK", message="held")), errors.Leak)
    assert isinstance(errors.from_rpc_error(answer("HELD", message="leak")), errors.Held)


def test_a_reason_of_another_domain_is_no_reason():
    err = errors.from_rpc_error(answer("HELD", domain="example.com"))
    assert type(err) is errors.UnknownOutcome


def test_a_reason_this_client_does_not_know_is_still_a_refusal():
    err = errors.from_rpc_error(answer("SOMETHING_NEW"))
    assert type(err) is errors.Refused and err.definite and err.reason == "SOMETHING_NEW"


def test_wrong_region_and_moving_carry_what_lockd_said():
    wr = errors.from_rpc_error(answer("WRONG_REGION", metadata={"region": "eu", "endpoint": "lockd.eu:7420"}))
    assert isinstance(wr, errors.WrongRegion) and (wr.region, wr.endpoint) == ("eu", "lockd.eu:7420")
    mv = errors.from_rpc_error(answer("MOVING", grpc.StatusCode.ABORTED, metadata={"retry_after_ms": "250"}))
    assert isinstance(mv, errors.Moving) and mv.retry_after == 0.25


def test_forced_error_names_who_and_why():
    e = errors.ForcedError("spiffe://x/op1", "spiffe://x/op2", "INC-1: wedged")
    assert isinstance(e, errors.LockLost)
    assert (e.requester, e.approver, e.reason) == ("spiffe://x/op1", "spiffe://x/op2", "INC-1: wedged")
    assert "op1" in str(e) and "INC-1" in str(e)
