; Node kinds the planner looks for around the cursor (edit_engine/syntax.py).
(comment) @comment
(string) @string
(block) @block
[(argument_list) (parameters) (lambda_parameters) (list) (tuple) (dictionary) (set) (subscript)
 (parenthesized_expression) (generator_expression) (list_comprehension) (dictionary_comprehension)
 (set_comprehension)] @brackets
[(expression_statement) (return_statement) (assert_statement) (raise_statement) (pass_statement)
 (import_statement) (import_from_statement) (if_statement) (for_statement) (while_statement)
 (try_statement) (with_statement) (function_definition) (class_definition) (decorated_definition)
 (delete_statement) (global_statement) (nonlocal_statement) (break_statement) (continue_statement)] @unit
