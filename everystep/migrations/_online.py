"""Migration operations that leave the runs table writable while they run (issue 22).

A plain ``CREATE INDEX`` on PostgreSQL holds a lock that blocks every insert and update of
the table until the index is built: minutes at a hundred million runs, during which
``schedule()`` and every step record wait. These operations build and drop indexes
``CONCURRENTLY`` on PostgreSQL, state ``ALGORITHM=INPLACE LOCK=NONE`` on MariaDB (so the
server refuses rather than silently locks the table) and stay plain on SQLite. Their state
changes are Django's own ``AddIndex``/``RemoveIndex``/``AddField``, so the schema a project
ends with is the one the models describe.

``CONCURRENTLY`` cannot run inside a transaction, and an index built in the transaction
of a migration that adds a column would hold the column add's exclusive lock (which
blocks reads too) for the whole build. So the migrations are of two kinds: atomic ones
that add columns and tables and build no index on an existing table (``AddIndexLater``,
``AddFieldIndexLater``, ``AddFieldKeepDefault``), and ``atomic = False`` ones made only of
idempotent index operations (``AddIndexOnline``, ``RemoveIndexOnline``, ``BuildIndex``), so
one interrupted halfway (a deploy killed, a cancelled build) is safe to run again. A
concurrent build that fails leaves an INVALID index behind; a re-run drops it and builds
it again, and a valid index of the same name is kept.

The module's name starts with ``_`` so that Django's migration loader does not take it for
a migration.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations import AddField, AddIndex, RemoveIndex
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

# MariaDB and MySQL build and drop secondary indexes in place without blocking writes by
# default; saying so makes the server refuse (rather than silently lock the table) if it
# cannot.
_MARIADB_ONLINE = " ALGORITHM=INPLACE LOCK=NONE"


def _vendor(schema_editor: BaseDatabaseSchemaEditor) -> str:
    return schema_editor.connection.vendor


def _refuse_transaction(schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.in_atomic_block:
        raise RuntimeError(
            "an online index operation must run in a migration with atomic = False "
            "(CREATE INDEX CONCURRENTLY cannot run inside a transaction)"
        )


def _pg_index_valid(schema_editor: BaseDatabaseSchemaEditor, name: str) -> bool | None:
    """True or False for an index of that name (valid or left INVALID by a failed build),
    None if there is none."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
            [schema_editor.quote_name(name)],
        )
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


def _mysql_index_exists(
    schema_editor: BaseDatabaseSchemaEditor, model: type[models.Model], name: str
) -> bool:
    # MySQL has no IF [NOT] EXISTS for indexes (MariaDB has): ask, for both.
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()"
            " AND TABLE_NAME = %s AND INDEX_NAME = %s",
            [model._meta.db_table, name],
        )
        return cursor.fetchone() is not None


def create_index(
    schema_editor: BaseDatabaseSchemaEditor, model: type[models.Model], index: models.Index
) -> None:
    """Build ``index`` without blocking writes to the table; keep a valid one of that name."""
    vendor = _vendor(schema_editor)
    if vendor == "postgresql":
        _refuse_transaction(schema_editor)
        valid = _pg_index_valid(schema_editor, index.name)
        if valid:
            return
        if valid is False:
            drop_index(schema_editor, model, index.name)
        sql = schema_editor.sql_create_index_concurrently  # type: ignore[attr-defined]
        sql = sql.replace("%(name)s", "IF NOT EXISTS %(name)s", 1)
    elif vendor == "mysql":
        if _mysql_index_exists(schema_editor, model, index.name):
            return
        sql = schema_editor.sql_create_index + _MARIADB_ONLINE
    else:
        sql = schema_editor.sql_create_index.replace("%(name)s", "IF NOT EXISTS %(name)s", 1)
    schema_editor.execute(index.create_sql(model, schema_editor, sql=sql), params=None)


def drop_index(
    schema_editor: BaseDatabaseSchemaEditor,
    model: type[models.Model],
    name: str,
    online: bool = True,
) -> None:
    """Drop the index ``name`` if there is one; ``online``: without blocking writes."""
    vendor = _vendor(schema_editor)
    quote = schema_editor.quote_name
    if vendor == "postgresql" and online:
        _refuse_transaction(schema_editor)
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(name)}")
    elif vendor == "mysql":
        if _mysql_index_exists(schema_editor, model, name):
            schema_editor.execute(
                f"ALTER TABLE {quote(model._meta.db_table)} DROP INDEX {quote(name)}"
                + (", ALGORITHM=INPLACE, LOCK=NONE" if online else "")
            )
    else:
        schema_editor.execute(f"DROP INDEX IF EXISTS {quote(name)}")


def _models(
    app_label: str, model_name: str, from_state: ProjectState, to_state: ProjectState
) -> tuple[type[models.Model], type[models.Model]]:
    return (
        from_state.apps.get_model(app_label, model_name),
        to_state.apps.get_model(app_label, model_name),
    )


class AddIndexOnline(AddIndex):
    """``AddIndex`` built concurrently on PostgreSQL, online on MariaDB; idempotent."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        _, model = _models(app_label, self.model_name, from_state, to_state)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            create_index(schema_editor, model, self.index)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        model, _ = _models(app_label, self.model_name, from_state, to_state)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            drop_index(schema_editor, model, self.index.name)


class RemoveIndexOnline(RemoveIndex):
    """``RemoveIndex`` dropped concurrently on PostgreSQL, online on MariaDB; idempotent."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        model, _ = _models(app_label, self.model_name, from_state, to_state)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            drop_index(schema_editor, model, self.name)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        _, model = _models(app_label, self.model_name, from_state, to_state)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            create_index(schema_editor, model, index)


class AddIndexLater(AddIndex):
    """``AddIndex`` whose build is left to a later, non-atomic migration (``BuildIndex``):
    an atomic migration that adds columns must not also build an index, or it holds the
    column add's exclusive lock on the table for the whole build. Reversing it drops the
    index, whichever migration built it."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        pass

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        model, _ = _models(app_label, self.model_name, from_state, to_state)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            drop_index(schema_editor, model, self.index.name, online=False)


class AddFieldIndexLater(AddField):
    """``AddField`` for a foreign key on a big table: the column and its constraint are
    added at once (a new nullable column without a default: PostgreSQL checks no row and
    rewrites nothing), and the column's index is left to ``BuildFieldIndex`` in a later,
    non-atomic migration. On MariaDB the constraint brings its own index, built in place
    (foreign key checks are off for the statement: the new column holds only NULLs, so there
    is nothing to check, and with checks on InnoDB would copy the whole table)."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        vendor = _vendor(schema_editor)
        if vendor == "postgresql":
            field: Any = self.field.clone()
            field.db_index = False
            without_index = AddField(self.model_name, self.name, field)
            state = from_state.clone()
            without_index.state_forwards(app_label, state)
            without_index.database_forwards(app_label, schema_editor, from_state, state)
        elif vendor == "mysql":
            # Django adds the constraint in the ADD COLUMN statement itself; saying the
            # algorithm makes the server refuse rather than copy the table under a lock.
            inline_fk = schema_editor.sql_create_column_inline_fk
            schema_editor.sql_create_column_inline_fk = inline_fk + ", ALGORITHM=INPLACE, LOCK=NONE"
            schema_editor.execute("SET SESSION foreign_key_checks = 0")
            try:
                super().database_forwards(app_label, schema_editor, from_state, to_state)
            finally:
                schema_editor.execute("SET SESSION foreign_key_checks = 1")
                schema_editor.sql_create_column_inline_fk = inline_fk
        else:
            super().database_forwards(app_label, schema_editor, from_state, to_state)


class BuildIndex(Operation):
    """Build, online, an index an earlier migration's state already has (``AddIndexLater``)
    or the index of a foreign key added with ``AddFieldIndexLater`` (``field=``). Changes
    no state; reversing it does nothing (the earlier migration's reversal drops it)."""

    reversible = True

    def __init__(self, model_name: str, index_name: str = "", field: str = "") -> None:
        self.model_name = model_name
        self.index_name = index_name
        self.field = field

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        kwargs = {"index_name": self.index_name} if self.index_name else {"field": self.field}
        return self.__class__.__name__, [self.model_name], kwargs

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if self.index_name:
            state = to_state.models[app_label, self.model_name.lower()]
            create_index(schema_editor, model, state.get_index_by_name(self.index_name))
            return
        field = model._meta.get_field(self.field)
        if not schema_editor._field_should_be_indexed(model, field):
            return  # MariaDB: the foreign key constraint made the index.
        # The name Django gives a field's own index, so the schema is the one AddField makes.
        name = schema_editor._create_index_name(model._meta.db_table, [field.column], suffix="")
        create_index(schema_editor, model, models.Index(fields=[field.name], name=name))

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        pass

    def describe(self) -> str:
        return f"Build index {self.index_name or self.field} on {self.model_name} online"


class AddFieldKeepDefault(AddField):
    """``AddField`` whose column keeps a default in the database (``database_default``,
    SQL; ``"now"`` is the current time), for a column the previous release does not know.

    Django adds a column with its default and then drops it, so a process of the previous
    release that inserts a run while (or after) the migration runs — the fleet before it
    is rolled — fails on a NOT NULL column, or writes NULL where the new code reads a
    meaning (a NULL ``due_at`` is a run waiting for an event: it would never be claimed).
    The column is added with Django's default (existing rows get it), and the statement
    that would drop it sets ``database_default`` instead (one statement: MariaDB's DDL is
    not transactional, a drop then a set would leave a moment without one). Both are
    metadata on PostgreSQL and MariaDB: no row is rewritten. SQLite cannot change a column's default
    without rebuilding the table, and needs none (a SQLite project upgrades with its one
    worker stopped). The state is ``AddField``'s: Django reads no database default back."""

    def __init__(self, *args: Any, database_default: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.database_default = database_default

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        _, args, kwargs = super().deconstruct()
        return (
            self.__class__.__name__,
            list(args),
            {**kwargs, "database_default": self.database_default},
        )

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        vendor = _vendor(schema_editor)
        if vendor not in ("postgresql", "mysql"):
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        default = self.database_default
        if default == "now":
            default = "CURRENT_TIMESTAMP(6)" if vendor == "mysql" else "CURRENT_TIMESTAMP"
        column = self.field.db_column or self.name  # not a foreign key: no _id
        drop_default = schema_editor._alter_column_default_sql

        def set_default(model: Any, old: Any, new: Any, drop: bool = False) -> Any:
            # Django's statement that drops the default sets this one instead.
            if drop and new.column == column:
                return f"ALTER COLUMN {schema_editor.quote_name(column)} SET DEFAULT {default}", []
            return drop_default(model, old, new, drop)

        schema_editor._alter_column_default_sql = set_default
        try:
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        finally:
            del schema_editor._alter_column_default_sql
