module github.com/snip/snip-jobs

go 1.26.0
