"""chosen_params: one reader for the cluster-wide settings tables."""
import pytest

from netstorm.geoserver.config.tables import chosen_params

TAKES = {"plain": (), "tuned": ("speed", "depth")}


class TableError(ValueError):
    pass


def test_the_parameters_of_the_named_kind_and_nothing_else():
    assert chosen_params({"kind": "tuned", "speed": 3}, "kind", "thing", TAKES,
                         TableError) == {"speed": 3}
    assert chosen_params({"kind": "plain"}, "kind", "thing", TAKES, TableError) == {}


@pytest.mark.parametrize("table, message", [
    ({"kind": "odd"}, r"thing 'odd' is unknown; accepted: 'plain', 'tuned'"),
    ({}, r"thing None is unknown"),
    ({"kind": "plain", "speed": 1}, r"thing 'plain' takes no 'speed' \(it takes nothing\)"),
    ({"kind": "tuned", "width": 1, 2: 0},
     r"thing 'tuned' takes no 2, 'width' \(it takes 'speed', 'depth'\)"),
])
def test_an_unknown_kind_or_parameter_is_refused_naming_what_is_accepted(table, message):
    with pytest.raises(TableError, match=message):
        chosen_params(table, "kind", "thing", TAKES, TableError)
