"""Environment discovery (AST, nothing imported) and config introspection (in a child process)."""
