"""lmchat and the formats around it: Hugging Face Jinja templates, LMDeploy and XTuner configs, model folders.

* :mod:`.jinja` (with :mod:`.jinja_env`, the sandbox, and :mod:`.jinja_files`,
  the model-folder and GGUF readers): a Jinja ``chat_template`` as a template;
* :mod:`.loading`: a template from a name, a file or a folder, and registered
  under a name;
* :mod:`.matching` and :mod:`.fingerprints`: which built-in template fits a model;
* :mod:`.export`: a built-in as an equivalent Jinja template, and
  :mod:`.battery`, the conversations ``lmchat check`` compares two templates on;
* :mod:`.training`: a conversation as input ids, labels and an assistant mask.

Nothing is imported here: ``lmchat render`` loads only what it uses.
"""
