"""The database: engines, migrations, SQLite and Postgres, and the copy between them."""
