"""The read models' query side: what a Cassandra row means, shared by the projector that writes the rows and
the gateway that reads them. It lives outside both services so that neither imports the other (the wall is an
import-linter contract in tools/import-walls.toml), and the two still cannot drift on a row's meaning."""
