; Node kinds the planner looks for around the cursor (edit_engine/syntax.py).
(comment) @comment
[(interpreted_string_literal) (raw_string_literal)] @string
[(block) (field_declaration_list)] @block
[(argument_list) (parameter_list) (literal_value) (index_expression) (parenthesized_expression)] @brackets
[(expression_statement) (short_var_declaration) (assignment_statement) (return_statement) (if_statement)
 (for_statement) (var_declaration) (const_declaration) (function_declaration) (method_declaration)
 (type_declaration) (go_statement) (defer_statement) (inc_statement) (dec_statement)] @unit
