from collections.abc import Callable, Container

def collect(
    buf: bytes | bytearray,
    start: int,
    stop: int,
    exact: bool,
    cat_codes: dict[str, int],
    flow_cats: Container[str],
    name_ids: dict[str | None, int],
    intern: Callable[[str], int],
    ids: Callable[[str], int],
    cache: object,
    /,
) -> tuple[int, int, dict[str, int]] | None: ...
def new_cache() -> object: ...

class Column:
    """One int64 column, exposed as a writable buffer."""

    def __buffer__(self, flags: int, /) -> memoryview: ...

def take_columns(cache: object, /) -> tuple[tuple[Column, ...] | None, ...]: ...
