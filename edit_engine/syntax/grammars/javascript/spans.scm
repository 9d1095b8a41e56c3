; Node kinds the planner looks for around the cursor (edit_engine/syntax.py).
(comment) @comment
[(string) (template_string)] @string
[(statement_block) (class_body) (switch_body)] @block
[(arguments) (formal_parameters) (array) (object) (parenthesized_expression) (subscript_expression)] @brackets
[(expression_statement) (return_statement) (lexical_declaration) (variable_declaration) (if_statement)
 (for_statement) (for_in_statement) (while_statement) (try_statement) (throw_statement)
 (function_declaration) (class_declaration) (break_statement) (continue_statement)] @unit
