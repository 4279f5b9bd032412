"""Model loading: fetch (config.json and safetensors headers, one revision, one offline flag)
then parse (config -> layer specs). Nothing after this stage touches the network or disk."""
