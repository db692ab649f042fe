"""Every error class cri-resmgr raises on purpose derives from CriResmgrError;
those that were ValueErrors still are."""

from __future__ import annotations

import pytest

from cri_resmgr.config import ConfigError
from cri_resmgr.config.options import OptionFileError
from cri_resmgr.dump import DumpSpecError
from cri_resmgr.errors import CriResmgrError
from cri_resmgr.frontend.agent_client import AgentError, AgentUnavailableError
from cri_resmgr.policy.api import PolicyError
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.registry import UnknownPolicy
from cri_resmgr.topology import TopologyError
from cri_resmgr.topology.cpuallocator import AllocationError
from cri_resmgr.transport.contract import InterceptError
from cri_resmgr.transport.sockets import SocketError
from cri_resmgr_agent.cli import UsageError
from cri_resmgr_agent.node_ops import NodeOpError
from cri_resmgr_agent.relay_client import RelayUnavailable

VALUE_ERRORS = [ConfigError, OptionFileError, DumpSpecError, ConfigValueError, UnknownPolicy, TopologyError,
                NodeOpError]
OTHERS = [AgentError, AgentUnavailableError, PolicyError, AllocationError, InterceptError, SocketError,
          UsageError, RelayUnavailable]


@pytest.mark.parametrize("cls", VALUE_ERRORS + OTHERS, ids=lambda c: c.__name__)
def test_project_errors_share_one_root(cls):
    assert issubclass(cls, CriResmgrError)
    assert not issubclass(CriResmgrError, (ValueError, TypeError))


@pytest.mark.parametrize("cls", VALUE_ERRORS, ids=lambda c: c.__name__)
def test_value_errors_stay_value_errors(cls):
    assert issubclass(cls, ValueError)
